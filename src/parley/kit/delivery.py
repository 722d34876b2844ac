"""Delivering an outbound message with retries, the part webhook events and notifications share: the retry
policy, one guarded POST and how its answer is judged, moving a delivery row on after an attempt, the
claim, the worker job's loop, the recovery query and reading the attempt log.

What a message is, how it is sent and what an attempt's log row holds stay in the domains
(:mod:`parley.webhooks`, :mod:`parley.notifications`); they hand this module their delivery model and
three callables (:class:`DeliveryJob`).

A delivery goes pending → sending → delivered | retrying → sending ... | failed. The job is idempotent by
delivery id: a delivered or failed delivery is skipped, one being sent by another worker is left alone,
and the claim is a conditional update, so two runs of the same job never both send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Protocol, TypeVar, cast

import httpx
from pydantic import BaseModel
from sqlalchemy import Table, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.db import utcnow
from parley.kit.jobs import JobContext, Payload, registry, runner_for
from parley.kit.outbound import BlockedDestination, OutboundPolicy, guarded_client, read_limited

Outcome = Literal["delivered", "transient", "permanent"]  # of one attempt
DeliveryStatus = Literal["pending", "sending", "retrying", "delivered", "failed"]
# Statuses a delivery never leaves.
FINAL = frozenset({"delivered", "failed"})
RECOVERY_LIMIT = 1000


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long apart a transient failure is tried again (from the settings)."""

    delays: Sequence[float]  # seconds before retry n (the last one repeats)
    max_attempts: int

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th attempt failed."""
        delays = self.delays
        return float(delays[min(attempts - 1, len(delays) - 1)]) if delays else 0.0


_MAX_RESPONSE_BYTES = 64 * 1024
_EXCERPT = 200
_TRANSIENT_HTTP = frozenset({408, 425, 429})


def excerpt(text: str) -> str:
    """The start of a receiver's answer for a log, whitespace folded ("" when it said nothing)."""
    text = " ".join(text.split())
    return text[:_EXCERPT] + ("…" if len(text) > _EXCERPT else "")


@dataclass(frozen=True)
class Posted:
    """How one POST went. ``reason`` says why it failed when that is not the status itself: refused,
    unreachable, no answer in time, a redirect; the domain words the rest. ``text`` is the answer's
    start (at most 64 KiB read)."""

    outcome: Outcome
    status_code: int | None
    reason: str | None = None
    text: str = ""
    timed_out: bool = False


async def post_once(
    policy: OutboundPolicy, url: str, body: bytes, headers: dict[str, str], seconds: float
) -> Posted:
    """One POST through the SSRF-guarded client, never following a redirect; never raises for a delivery
    problem. 2xx delivers; 408, 425, 429, 5xx, a time-out or a failed connection are worth retrying;
    any other answer, a redirect or a refused destination are not."""
    try:
        async with guarded_client(policy, timeout=seconds) as client:
            request = client.build_request("POST", url, content=body, headers=headers)
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                text = (await read_limited(response, _MAX_RESPONSE_BYTES)).decode("utf-8", "replace")
            except Exception:  # an oversized or broken body does not change the status we got
                text = ""
            finally:
                await response.aclose()
    except BlockedDestination as exc:
        return Posted("permanent", None, str(exc))
    except httpx.TimeoutException:
        return Posted("transient", None, "The receiver did not answer in time.", timed_out=True)
    except httpx.HTTPError:
        return Posted("transient", None, "The receiver cannot be reached.")
    status = response.status_code
    if 200 <= status < 300:
        return Posted("delivered", status, None, text)
    if 300 <= status < 400:
        return Posted(
            "permanent", status, f"The receiver redirected (HTTP {status}); configure the final URL.", text
        )
    return Posted(
        "transient" if status >= 500 or status in _TRANSIENT_HTTP else "permanent", status, None, text
    )


class Sent(Protocol):
    """What the job and the bookkeeping read of a domain's send result."""

    @property
    def outcome(self) -> str: ...  # delivered | transient | permanent

    @property
    def status_code(self) -> int | None: ...


class DeliveryRow(Protocol):
    """The columns every delivery model has (``webhook_deliveries``, ``notification_deliveries``)."""

    id: str
    organization_id: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    claimed_at: datetime | None
    delivered_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    updated_at: datetime


def settle(
    delivery: DeliveryRow,
    policy: RetryPolicy,
    result: Sent,
    last_error: str | None,
    *,
    retry: bool,
) -> float | None:
    """Move ``delivery`` on after the attempt that gave ``result``: delivered, retrying (only a transient
    failure with ``retry`` and attempts left) or failed. Returns the delay before the retry, if one is due.
    ``last_error`` is the domain's reason, stored unless the attempt delivered."""
    now = utcnow()
    delivery.last_status_code = result.status_code
    delivery.claimed_at = None
    delivery.updated_at = now
    if result.outcome == "delivered":
        delivery.status, delivery.delivered_at, delivery.last_error = "delivered", now, None
        delivery.next_attempt_at = None
        return None
    delivery.last_error = last_error
    if retry and result.outcome == "transient" and delivery.attempts < policy.max_attempts:
        delay = policy.delay(delivery.attempts)
        delivery.status, delivery.next_attempt_at = "retrying", now + timedelta(seconds=delay)
        return delay
    delivery.status, delivery.next_attempt_at = "failed", None
    return None


def _table(model: type[Any]) -> Table:
    return cast(Table, model.__table__)


D = TypeVar("D", bound=DeliveryRow)
R = TypeVar("R", bound=Sent)
Out = TypeVar("Out", bound=BaseModel)


async def attempt_logs(
    session: AsyncSession, deliveries: Sequence[DeliveryRow], *, model: type[Any], out: type[Out]
) -> dict[str, list[Out]]:
    """The attempts (rows of ``model``) of ``deliveries`` of one organization as ``out``, by delivery id,
    in the order they were made."""
    if not deliveries:
        return {}
    table = _table(model)
    rows = await session.scalars(
        select(model)
        .where(
            table.c.organization_id == deliveries[0].organization_id,
            table.c.delivery_id.in_([d.id for d in deliveries]),
        )
        .order_by(table.c.delivery_id, table.c.number, table.c.id)
    )
    logs: dict[str, list[Out]] = {}
    for row in rows:
        logs.setdefault(row.delivery_id, []).append(out.model_validate(row))
    return logs


# In the claim's unit: read what sending needs, and return the attempt to run once that unit is over.
Prepare = Callable[[AsyncSession, Settings, D], Awaitable[Callable[[], Awaitable[R]]]]
# In a short unit of its own: log the attempt, move the delivery on; the delay before a retry, if any.
Record = Callable[[AsyncSession, Settings, D, R, datetime], float | None]


@dataclass(frozen=True)
class DeliveryJob(Generic[D, R]):
    """A domain's ``<domain>.deliver`` job over its delivery ``model``: :meth:`deliver` is the handler,
    :meth:`unfinished` the recovery after a restart."""

    name: str
    model: type[D]
    # A claim older than this is taken to be from a worker that died mid-send.
    stale_claim: timedelta
    prepare: Prepare[D, R]
    record: Record[D, R]
    log: Any  # the domain's structlog logger
    attempt_event: str  # the log event of one attempt (webhook_attempt, notification_attempt)

    def schedule(self, ctx: JobContext, delivery_id: str, delay: float) -> None:
        """Run the delivery again after ``delay`` seconds (stored with the job on the Redis queue, so any
        worker retries it; in process, the recovery query covers a restart)."""
        runner_for(ctx.state).enqueue_later(self.name, {"delivery_id": delivery_id}, delay)

    async def deliver(self, ctx: JobContext, payload: Payload) -> None:
        """Claim the delivery, send it once outside any transaction, log the attempt in a short unit of
        its own and schedule the retry. A crash between sending and recording can repeat a message;
        receivers see the same delivery id and can drop the duplicate."""
        model, table = self.model, _table(self.model)
        delivery_id = str(payload.get("delivery_id", ""))
        settings = ctx.settings
        now = utcnow()
        async with ctx.unit() as session:
            delivery = await session.get(model, delivery_id)
            if delivery is None or delivery.status in FINAL:
                return
            if (
                delivery.status == "sending"
                and delivery.claimed_at
                and delivery.claimed_at > now - self.stale_claim
            ):
                return  # another worker is sending it
            if delivery.next_attempt_at is not None and delivery.next_attempt_at > now:
                self.schedule(ctx, delivery.id, (delivery.next_attempt_at - now).total_seconds())
                return
            claimed = await session.execute(
                update(model)
                .where(
                    table.c.id == delivery.id,
                    table.c.status == delivery.status,
                    table.c.attempts == delivery.attempts,
                )
                .values(status="sending", attempts=delivery.attempts + 1, claimed_at=now, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                await session.rollback()
                return
            attempt = await self.prepare(session, settings, delivery)
        # The transaction is over: the receiver may take its time without holding a connection.
        delivery.attempts += 1
        result = await attempt()
        async with ctx.unit() as session:  # a short unit: the attempt and the delivery's new state
            stored = await session.get(model, delivery.id)
            if stored is None:  # the organization was deleted meanwhile
                return
            delay = self.record(session, settings, stored, result, now)
        self.log.info(
            self.attempt_event,
            delivery_id=delivery.id,
            attempt=stored.attempts,
            outcome=result.outcome,
            status_code=result.status_code,
            status=stored.status,
        )
        if delay is not None:
            self.schedule(ctx, delivery.id, delay)

    async def unfinished(self, session: AsyncSession) -> list[Payload]:
        """Deliveries to (re)start after a restart: pending, waiting to retry, or claimed by a dead worker."""
        table = _table(self.model)
        stale = utcnow() - self.stale_claim
        ids = await session.scalars(
            select(table.c.id)
            .where(
                or_(
                    table.c.status.in_(("pending", "retrying")),
                    (table.c.status == "sending") & (table.c.claimed_at < stale),
                )
            )
            .order_by(table.c.id)
            .limit(RECOVERY_LIMIT)
        )
        return [{"delivery_id": delivery_id} for delivery_id in ids]

    def register(self) -> None:
        registry.register(self.name, self.deliver, recover=self.unfinished)
