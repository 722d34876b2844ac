"""The ``notifications.deliver`` job (the claim, the attempt loop and the recovery are
:class:`parley.kit.delivery.DeliveryJob`): what an attempt at a notification reads and sends.

A crash between sending and recording can repeat a message; receivers see the same
``X-Parley-Delivery`` id (webhooks) or ``Message-ID`` (email) and can drop the duplicate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.delivery import DeliveryJob
from parley.notifications import service
from parley.notifications.models import NotificationChannel, NotificationDelivery
from parley.notifications.senders import SendResult

log = structlog.get_logger("parley.notifications")

# A claim older than this is taken to be from a worker that died mid-send.
STALE_CLAIM = timedelta(minutes=10)


async def prepare(
    session: AsyncSession, settings: Settings, delivery: NotificationDelivery
) -> Callable[[], Awaitable[SendResult]]:
    """Read the channel in the claim's unit; the attempt sends once it is over."""
    channel = await session.scalar(
        select(NotificationChannel).where(
            NotificationChannel.id == delivery.channel_id,
            NotificationChannel.organization_id == delivery.organization_id,
        )
    )

    async def attempt() -> SendResult:
        if channel is None:
            return SendResult("permanent", None, "The channel was deleted.")
        if not channel.enabled:
            return SendResult("permanent", None, "The channel is disabled.")
        return await service.send(settings, channel, delivery)

    return attempt


# The job's attempts may be retried (a test send records its one attempt with ``retry=False``).
record = partial(service.record_attempt, retry=True)
JOB = DeliveryJob(
    service.DELIVER_JOB, NotificationDelivery, STALE_CLAIM, prepare, record, log, "notification_attempt"
)
deliver, unfinished = JOB.deliver, JOB.unfinished
JOB.register()
