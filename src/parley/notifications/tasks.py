"""The ``notifications.deliver`` job: claim a delivery, send it once, log the attempt, retry later.

Idempotent by delivery id: a delivery already delivered or failed is skipped, one being sent by another
worker is left alone, and the claim is a conditional update, so two runs of the same job never both
send. A crash between sending and recording can still repeat a message; receivers see the same
``X-Parley-Delivery`` id (webhooks) or ``Message-ID`` (email) and can drop the duplicate.
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import utcnow
from parley.kit.jobs import JobContext, Payload, registry, runner_for
from parley.notifications import service
from parley.notifications.models import NotificationChannel, NotificationDelivery
from parley.notifications.senders import SendResult

log = structlog.get_logger("parley.notifications")

# A claim older than this is taken to be from a worker that died mid-send.
STALE_CLAIM = timedelta(minutes=10)
RECOVERY_LIMIT = 1000


def schedule(ctx: JobContext, delivery_id: str, delay: float) -> None:
    """Run the delivery job again after ``delay`` seconds (on the Redis queue the delay is stored with
    the job, so any worker retries it; in process, recovery covers a restart)."""
    runner_for(ctx.state).enqueue_later(service.DELIVER_JOB, {"delivery_id": delivery_id}, delay)


async def deliver(ctx: JobContext, payload: Payload) -> None:
    delivery_id = str(payload.get("delivery_id", ""))
    settings = ctx.settings
    now = utcnow()
    async with ctx.unit() as session:
        delivery = await session.get(NotificationDelivery, delivery_id)
        if delivery is None or delivery.status in service.FINAL:
            return
        if delivery.status == "sending" and delivery.claimed_at and delivery.claimed_at > now - STALE_CLAIM:
            return  # another worker is sending it
        if delivery.next_attempt_at is not None and delivery.next_attempt_at > now:
            schedule(ctx, delivery.id, (delivery.next_attempt_at - now).total_seconds())
            return
        claimed = await session.execute(
            update(NotificationDelivery)
            .where(
                NotificationDelivery.id == delivery.id,
                NotificationDelivery.status == delivery.status,
                NotificationDelivery.attempts == delivery.attempts,
            )
            .values(status="sending", attempts=delivery.attempts + 1, claimed_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            await session.rollback()
            return
        channel = await session.scalar(
            select(NotificationChannel).where(
                NotificationChannel.id == delivery.channel_id,
                NotificationChannel.organization_id == delivery.organization_id,
            )
        )
    delivery.attempts += 1
    if channel is None:
        result = SendResult("permanent", None, "The channel was deleted.")
    elif not channel.enabled:
        result = SendResult("permanent", None, "The channel is disabled.")
    else:
        result = await service.send(settings, channel, delivery)
    async with ctx.unit() as session:
        stored = await session.get(NotificationDelivery, delivery.id)
        if stored is None:  # the organization was deleted meanwhile
            return
        delay = service.record_attempt(session, settings, stored, result, now, retry=True)
    log.info(
        "notification_attempt",
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
        select(NotificationDelivery.id)
        .where(
            or_(
                NotificationDelivery.status.in_(("pending", "retrying")),
                (NotificationDelivery.status == "sending") & (NotificationDelivery.claimed_at < stale),
            )
        )
        .order_by(NotificationDelivery.id)
        .limit(RECOVERY_LIMIT)
    )
    return [{"delivery_id": delivery_id} for delivery_id in ids]


registry.register(service.DELIVER_JOB, deliver, recover=unfinished)
