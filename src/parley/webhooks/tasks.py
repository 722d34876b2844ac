"""The ``webhooks.deliver`` job (the claim, the attempt loop and the recovery are
:class:`parley.kit.delivery.DeliveryJob`): what an attempt at a webhook delivery reads and sends.

A crash between sending and recording can repeat an event; receivers see the same
``X-Parley-Delivery`` id and event ``id`` and can drop the duplicate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial

import orjson
import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.delivery import DeliveryJob
from parley.webhooks import service
from parley.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription

log = structlog.get_logger("parley.webhooks")

# A claim older than this is taken to be from a worker that died mid-send.
STALE_CLAIM = timedelta(minutes=5)


async def prepare(
    session: AsyncSession, settings: Settings, delivery: WebhookDelivery
) -> Callable[[], Awaitable[service.SendResult]]:
    """Read the subscription and the event in the claim's unit; the attempt sends once it is over."""
    subscription = await session.scalar(
        select(WebhookSubscription).where(
            WebhookSubscription.id == delivery.subscription_id,
            WebhookSubscription.organization_id == delivery.organization_id,
        )
    )
    event = await session.get(WebhookEvent, delivery.event_id)
    body = orjson.dumps(service.envelope(event, test=delivery.kind == "test")) if event else b""

    async def attempt() -> service.SendResult:
        if subscription is None:
            return service.SendResult("permanent", None, "The subscription was deleted.")
        if not subscription.active:
            return service.SendResult("permanent", None, "The subscription is paused (active: false).")
        if event is None:
            return service.SendResult("permanent", None, "The event was deleted.")
        return await service.send(settings, subscription, delivery, body)

    return attempt


# The job's attempts may be retried (a test send records its one attempt with ``retry=False``).
record = partial(service.record_attempt, retry=True)
JOB = DeliveryJob(service.DELIVER_JOB, WebhookDelivery, STALE_CLAIM, prepare, record, log, "webhook_attempt")
deliver, unfinished = JOB.deliver, JOB.unfinished
JOB.register()
