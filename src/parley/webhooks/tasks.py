"""The ``webhooks.deliver`` job: claim a delivery, send it once outside any transaction, log the attempt
in a short unit of its own, and schedule the retry.

Idempotent by delivery id: a delivered or failed delivery is skipped, one being sent by another worker
is left alone, and the claim is a conditional update, so two runs of the same job never both send. A
crash between sending and recording can repeat an event; receivers see the same ``X-Parley-Delivery``
id and event ``id`` and can drop the duplicate.
"""

from __future__ import annotations

from datetime import timedelta

import orjson
import structlog
from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import utcnow
from parley.kit.jobs import JobContext, Payload, registry, runner_for
from parley.webhooks import service
from parley.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription

log = structlog.get_logger("parley.webhooks")

# A claim older than this is taken to be from a worker that died mid-send.
STALE_CLAIM = timedelta(minutes=5)
RECOVERY_LIMIT = 1000


def schedule(ctx: JobContext, delivery_id: str, delay: float) -> None:
    """Run the delivery again after ``delay`` seconds (stored with the job on the Redis queue; in
    process, the recovery query covers a restart)."""
    runner_for(ctx.state).enqueue_later(service.DELIVER_JOB, {"delivery_id": delivery_id}, delay)


async def deliver(ctx: JobContext, payload: Payload) -> None:
    delivery_id = str(payload.get("delivery_id", ""))
    settings = ctx.settings
    now = utcnow()
    async with ctx.unit() as session:
        delivery = await session.get(WebhookDelivery, delivery_id)
        if delivery is None or delivery.status in service.FINAL:
            return
        if delivery.status == "sending" and delivery.claimed_at and delivery.claimed_at > now - STALE_CLAIM:
            return  # another worker is sending it
        if delivery.next_attempt_at is not None and delivery.next_attempt_at > now:
            schedule(ctx, delivery.id, (delivery.next_attempt_at - now).total_seconds())
            return
        claimed = await session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery.id,
                WebhookDelivery.status == delivery.status,
                WebhookDelivery.attempts == delivery.attempts,
            )
            .values(status="sending", attempts=delivery.attempts + 1, claimed_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            await session.rollback()
            return
        subscription = await session.scalar(
            select(WebhookSubscription).where(
                WebhookSubscription.id == delivery.subscription_id,
                WebhookSubscription.organization_id == delivery.organization_id,
            )
        )
        event = await session.get(WebhookEvent, delivery.event_id)
        body = orjson.dumps(service.envelope(event, test=delivery.kind == "test")) if event else b""
    # The transaction is over: the receiver may take its time without holding a connection.
    delivery.attempts += 1
    if subscription is None:
        result = service.SendResult("permanent", None, "The subscription was deleted.")
    elif not subscription.active:
        result = service.SendResult("permanent", None, "The subscription is paused (active: false).")
    elif event is None:
        result = service.SendResult("permanent", None, "The event was deleted.")
    else:
        result = await service.send(settings, subscription, delivery, body)
    async with ctx.unit() as session:  # a short unit: the attempt and the delivery's new state
        stored = await session.get(WebhookDelivery, delivery.id)
        if stored is None:  # the organization was deleted meanwhile
            return
        delay = service.record_attempt(session, settings, stored, result, now, retry=True)
    log.info(
        "webhook_attempt",
        delivery_id=delivery.id,
        attempt=stored.attempts,
        outcome=result.outcome,
        status_code=result.status_code,
        status=stored.status,
    )
    if delay is not None:
        schedule(ctx, delivery.id, delay)


async def unfinished(session: AsyncSession) -> list[Payload]:
    """Deliveries to (re)start after a restart: pending, waiting to retry, or claimed by a dead worker."""
    stale = utcnow() - STALE_CLAIM
    ids = await session.scalars(
        select(WebhookDelivery.id)
        .where(
            or_(
                WebhookDelivery.status.in_(("pending", "retrying")),
                (WebhookDelivery.status == "sending") & (WebhookDelivery.claimed_at < stale),
            )
        )
        .order_by(WebhookDelivery.id)
        .limit(RECOVERY_LIMIT)
    )
    return [{"delivery_id": delivery_id} for delivery_id in ids]


registry.register(service.DELIVER_JOB, deliver, recover=unfinished)
