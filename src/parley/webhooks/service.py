"""Call events: subscriptions, publishing an event inside the caller's unit of work, and sending one
signed delivery attempt at a time (docs/webhooks.md).

Any package publishes with :func:`publish_event` while it writes what the event is about: the event
and one pending delivery per matching subscription are flushed in that transaction, and the
``webhooks.deliver`` jobs are queued once it commits. Sending happens in those jobs, outside any
transaction (:mod:`parley.webhooks.tasks`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, cast

import orjson
import structlog
from pydantic_core import to_jsonable_python
from sqlalchemy import Select, Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.kit.crypto import SecretDecryptionError, mask, row_secrets
from parley.kit.db import plain_insert, short_read, utcnow
from parley.kit.delivery import Outcome, RetryPolicy, attempt_logs, excerpt, post_once, settle
from parley.kit.errors import InvalidFields
from parley.kit.filters import created_within, text_filter
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue, enqueue_after_commit
from parley.kit.orgcache import cached, watch
from parley.kit.outbound import outbound_policy
from parley.kit.signing import SIGNATURE_HEADER, sign
from parley.kit.tenancy import get_owned, scoped
from parley.notifications.destinations import DestinationRefused, check_url
from parley.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription
from parley.webhooks.schemas import (
    EVENT_TYPES,
    AttemptOut,
    DeliveryDetailOut,
    DeliveryOut,
    SubscriptionCreate,
    SubscriptionOut,
    SubscriptionUpdate,
)

log = structlog.get_logger("parley.webhooks")

DELIVER_JOB = "webhooks.deliver"
EVENT_HEADER = "X-Parley-Event"
DELIVERY_HEADER = "X-Parley-Delivery"
USER_AGENT = "Parley-Webhooks/1.0"


def _invalid(field: str, message: str, kind: str = "value_error") -> InvalidFields:
    return InvalidFields([{"type": kind, "loc": ("body", field), "msg": message, "input": None}])


# --- subscriptions -----------------------------------------------------------------------------


def to_subscription_out(subscription: WebhookSubscription) -> SubscriptionOut:
    return SubscriptionOut(
        id=subscription.id,
        url=subscription.url,
        event_types=[t for t in subscription.event_types if t in EVENT_TYPES],
        active=subscription.active,
        description=subscription.description,
        secret=subscription.secret_hint,
        created_at=subscription.created_at,
        updated_at=subscription.updated_at,
    )


async def _check_destination(settings: Settings, url: str) -> None:
    """The SSRF guard at save time (422 naming ``url``); the send-time check stays the authority."""
    try:
        await check_url(outbound_policy(settings), url)
    except DestinationRefused as exc:
        raise _invalid("url", str(exc), "destination_refused") from exc


def _seal(settings: Settings, subscription: WebhookSubscription, secret: str) -> None:
    subscription.secret = row_secrets(settings, subscription).seal("secret", secret)
    subscription.secret_hint = mask(secret)


async def get_subscription(
    session: AsyncSession, organization_id: str, subscription_id: str
) -> WebhookSubscription:
    return await get_owned(
        session, WebhookSubscription, subscription_id, organization_id, "Webhook subscription"
    )


async def create_subscription(
    session: AsyncSession, settings: Settings, context: OrgContext, data: SubscriptionCreate
) -> WebhookSubscription:
    await _check_destination(settings, data.url)
    subscription = WebhookSubscription(
        id=new_id("whs"),
        organization_id=context.organization_id,
        url=data.url,
        event_types=list(data.event_types),
        description=data.description,
        active=data.active,
        secret="",
        secret_hint="",
        created_by=context.actor_user_id,
    )
    _seal(settings, subscription, data.secret)
    session.add(subscription)
    await session.flush()
    return subscription


async def update_subscription(
    session: AsyncSession,
    settings: Settings,
    organization_id: str,
    subscription_id: str,
    data: SubscriptionUpdate,
) -> WebhookSubscription:
    subscription = await get_subscription(session, organization_id, subscription_id)
    changes = data.model_dump(exclude_unset=True)
    for name in ("url", "event_types", "secret", "active"):
        if name in changes and changes[name] is None:
            raise _invalid(name, "cannot be null")
    if "url" in changes and changes["url"] != subscription.url:
        await _check_destination(settings, changes["url"])
        subscription.url = changes["url"]
    if "event_types" in changes:
        subscription.event_types = list(changes["event_types"])
    if "secret" in changes:
        _seal(settings, subscription, changes["secret"])
    if "active" in changes:
        subscription.active = changes["active"]
    if "description" in changes:
        subscription.description = changes["description"]
    subscription.updated_at = utcnow()
    await session.flush()
    return subscription


async def delete_subscription(
    session: AsyncSession, organization_id: str, subscription_id: str
) -> WebhookSubscription:
    """Delete the subscription; its delivery log stays, unfinished deliveries end as failed."""
    subscription = await get_subscription(session, organization_id, subscription_id)
    await session.delete(subscription)
    await session.flush()
    return subscription


def subscriptions_query(organization_id: str, active: bool | None) -> Select[WebhookSubscription]:
    stmt = scoped(WebhookSubscription, organization_id)
    if active is not None:
        stmt = stmt.where(WebhookSubscription.active.is_(active))
    return stmt


# --- publishing --------------------------------------------------------------------------------


# Read by every event (a call's end, a session's start): built once, bound per call.
_ACTIVE_SUBSCRIPTIONS = (
    select(WebhookSubscription.id, WebhookSubscription.url, WebhookSubscription.event_types)
    .where(
        WebhookSubscription.organization_id == bindparam("organization_id"),
        WebhookSubscription.active.is_(True),
    )
    .order_by(WebhookSubscription.id)
)


@dataclass(frozen=True, slots=True)
class _Subscriber:
    """What publishing needs of an active subscription (no secret: it is read when sending)."""

    id: str
    url: str
    event_types: frozenset[str]


# The organization's active subscriptions, kept in the process (kit/orgcache.py): dropped when a
# subscription change commits here, seen within the cache's lifetime from another process.
_SUBSCRIBERS = "webhooks.subscribers"
watch(_SUBSCRIBERS, WebhookSubscription)


async def _subscribers(session: AsyncSession, organization_id: str) -> tuple[_Subscriber, ...]:
    async def load() -> tuple[_Subscriber, ...]:
        rows = await session.execute(_ACTIVE_SUBSCRIPTIONS, {"organization_id": organization_id})
        return tuple(_Subscriber(id, url, frozenset(types or ())) for id, url, types in rows)

    return await cached(session, _SUBSCRIBERS, organization_id, load)


_EVENTS = cast(Table, WebhookEvent.__table__)
_DELIVERIES = cast(Table, WebhookDelivery.__table__)


@dataclass(frozen=True)
class PlannedEvent:
    """An event to publish (:func:`plan_event`): its INSERT and one per pending delivery, in order."""

    statements: list[tuple[Executable, dict[str, Any]]]
    delivery_ids: list[str]


async def plan_event(
    session: AsyncSession, organization_id: str, event_type: str, data: Any
) -> PlannedEvent | None:
    """``event_type`` with ``data`` and a pending delivery for every active subscription of the
    organization that wants it, as statements to write; None when no subscription wants it. It only
    reads (the subscriptions, cached)."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    wanted = [s for s in await _subscribers(session, organization_id) if event_type in s.event_types]
    if not wanted:
        return None
    now = utcnow()
    event_id = new_id("evt")
    event = {
        "id": event_id,
        "organization_id": organization_id,
        "type": event_type,
        "data": to_jsonable_python(data),
        "created_at": now,
    }
    statements: list[tuple[Executable, dict[str, Any]]] = [(plain_insert(_EVENTS, tuple(event)), event)]
    for subscriber in wanted:  # after the event, which they reference
        delivery = {
            "id": new_id("whd"),
            "organization_id": organization_id,
            "kind": "event",
            "subscription_id": subscriber.id,
            "event_id": event_id,
            "event_type": event_type,
            "url": subscriber.url,
            "status": "pending",
            "attempts": 0,
            "created_at": now,
            "updated_at": now,
        }
        statements.append((plain_insert(_DELIVERIES, tuple(delivery)), delivery))
    return PlannedEvent(statements, [values["id"] for _, values in statements[1:]])


def queue_deliveries(session: AsyncSession, planned: PlannedEvent, *, jobs: JobQueue | None = None) -> None:
    """Queue the planned event's deliveries once ``session``'s unit of work has committed."""
    runner: JobQueue | None = jobs or session.info.get("jobs")
    if runner is None:
        event_id = planned.statements[0][1]["id"]
        log.warning("webhook_deliveries_not_queued", event_id=event_id, deliveries=len(planned.delivery_ids))
        return
    for delivery_id in planned.delivery_ids:
        enqueue_after_commit(session, runner, DELIVER_JOB, {"delivery_id": delivery_id})


async def publish_event(
    session: AsyncSession,
    organization_id: str,
    event_type: str,
    data: Any,
    *,
    jobs: JobQueue | None = None,
) -> list[str]:
    """Store ``event_type`` with ``data`` and a pending delivery for every active subscription of the
    organization that wants it; the deliveries are queued once ``session`` commits.

    Call it inside the unit of work that writes what the event is about: it writes in that
    transaction, so an event exists exactly when its subject does. Nothing is stored when no
    subscription wants the event. ``jobs`` defaults to the unit of work's queue
    (``session.info["jobs"]``); without one the pending deliveries are picked up by the job recovery at
    the next start. Returns the delivery ids.
    """
    planned = await plan_event(session, organization_id, event_type, data)
    if planned is None:
        return []
    for statement, values in planned.statements:
        await session.execute(statement, values)
    queue_deliveries(session, planned, jobs=jobs)
    return planned.delivery_ids


def envelope(event: WebhookEvent, *, test: bool = False) -> dict[str, Any]:
    """The JSON body every attempt of every delivery of ``event`` sends."""
    body: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
        "organization_id": event.organization_id,
        "data": event.data,
    }
    if test:
        body["test"] = True
    return body


# --- sending -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    status_code: int | None
    error: str | None
    snippet: str | None = None
    latency_ms: float = 0.0
    timed_out: bool = False


async def post(
    settings: Settings, url: str, secret: str, body: bytes, *, delivery_id: str, event_type: str
) -> SendResult:
    """One signed POST through the SSRF-guarded client; never raises for a delivery problem."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event_type,
        SIGNATURE_HEADER: sign(secret, int(time.time()), body),
    }
    started = time.perf_counter()
    posted = await post_once(outbound_policy(settings), url, body, headers, settings.webhook_timeout)
    latency = round((time.perf_counter() - started) * 1000, 1)
    error = posted.reason
    if error is None and posted.outcome != "delivered":
        error = f"The receiver answered HTTP {posted.status_code}."
    snippet = excerpt(posted.text) or None
    return SendResult(posted.outcome, posted.status_code, error, snippet, latency, posted.timed_out)


async def send(
    settings: Settings, subscription: WebhookSubscription, delivery: WebhookDelivery, body: bytes
) -> SendResult:
    """One attempt at ``delivery`` to ``subscription``; a bug becomes a logged permanent failure."""
    try:
        secret = row_secrets(settings, subscription).open("secret", subscription.secret)
    except SecretDecryptionError:
        return SendResult("permanent", None, "The signing secret cannot be read; save a new secret.")
    try:
        return await post(
            settings, subscription.url, secret, body, delivery_id=delivery.id, event_type=delivery.event_type
        )
    except Exception as exc:  # never lose the log row, never a 500; the type is logged only
        log.error("webhook_send_error", delivery_id=delivery.id, error_type=type(exc).__name__, exc_info=exc)
        return SendResult("permanent", None, "The event could not be sent (an internal error).")


def retry_policy(settings: Settings) -> RetryPolicy:
    return RetryPolicy(settings.webhook_retry_seconds, settings.webhook_max_attempts)


def retry_delay(settings: Settings, attempts: int) -> float:
    return retry_policy(settings).delay(attempts)


def record_attempt(
    session: AsyncSession,
    settings: Settings,
    delivery: WebhookDelivery,
    result: SendResult,
    started_at: datetime,
    *,
    retry: bool,
) -> float | None:
    """Log the attempt and move the delivery on; returns the delay before a retry, if one is due."""
    error = (result.error or "")[:1000] or None
    session.add(
        WebhookAttempt(
            id=new_id("wha"),
            organization_id=delivery.organization_id,
            delivery_id=delivery.id,
            number=delivery.attempts,
            outcome=result.outcome,
            status_code=result.status_code,
            latency_ms=result.latency_ms,
            error=error,
            response_snippet=(result.snippet or "")[:500] or None,
            started_at=started_at,
        )
    )
    return settle(delivery, retry_policy(settings), result, error, retry=retry)


def sample_data(event_type: str, organization_id: str) -> dict[str, Any]:
    """What a test-send carries: the documented shape of ``event_type`` with made-up values."""
    now = utcnow().isoformat().replace("+00:00", "Z")
    call = {
        "call_id": "call_00000000000000000000000000",
        "session_id": "ses_test",
        "flow_id": "flw_test",
        "flow_version": 1,
        "channel": "phone",
        "direction": "inbound",
        "caller": "+4930123456",
        "callee": "+4930654321",
        "started_at": now,
    }
    if event_type == "call.started":
        return call
    if event_type == "call.ended":
        return {
            **call,
            "ended_at": now,
            "duration_seconds": 42.0,
            "outcome": "completed",
            "end_reason": None,
            "transcript": [{"index": 0, "speaker": "agent", "text": "Hallo!", "at": now}],
            "variables": {},
            "tool_calls": [],
            "metrics": {"turn_count": 1, "mean_voice_latency_ms": None, "turns": [], "usage": {}},
            "recording_url": None,
        }
    if event_type == "call.analyzed":
        return {
            **call,
            "analysis_status": "done",
            "analysis_method": "variables",
            "summary": "A test call.",
            "extracted": {"callback_requested": True},
            "analyzed_at": now,
        }
    if event_type == "signal.raised":
        return {
            "signal_id": "sig_test",
            "type": "callback_requested",
            "severity": "medium",
            "source": "flow",
            "call_id": call["call_id"],
            "flow_id": "flw_test",
            "details": {},
            "occurred_at": now,
        }
    return {"campaign_id": "cmp_test", "contact_id": "cct_test", "status": "completed", "call_id": None}


async def test_subscription(
    session: AsyncSession, settings: Settings, organization_id: str, subscription_id: str, event_type: str
) -> tuple[WebhookDelivery, SendResult]:
    """Send a sample ``event_type`` (``"test": true``) to the subscription now, active or not, logged as a
    ``test`` delivery that is never retried. The subscription is read in a short read and the event sent
    before ``session`` writes anything: no transaction waits on the receiver."""
    async with short_read(session) as reader:
        subscription = await get_subscription(reader, organization_id, subscription_id)
    now = utcnow()
    event = WebhookEvent(
        id=new_id("evt"),
        organization_id=organization_id,
        type=event_type,
        data=sample_data(event_type, organization_id),
        created_at=now,
    )
    delivery = WebhookDelivery(
        id=new_id("whd"),
        organization_id=organization_id,
        kind="test",
        subscription_id=subscription.id,
        event_id=event.id,
        event_type=event_type,
        url=subscription.url,
        status="sending",
        attempts=1,
        created_at=now,
        updated_at=now,
    )
    result = await send(settings, subscription, delivery, orjson.dumps(envelope(event, test=True)))
    session.add(event)
    await session.flush()
    session.add(delivery)
    await session.flush()  # the attempt row references it
    record_attempt(session, settings, delivery, result, now, retry=False)
    await session.flush()
    return delivery, result


# --- reading -----------------------------------------------------------------------------------


# The attempts of some deliveries as the API shows them, by delivery id.
attempts_of = partial(attempt_logs, model=WebhookAttempt, out=AttemptOut)


def _delivery_fields(delivery: WebhookDelivery, attempts: list[AttemptOut] | None) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "kind": delivery.kind,
        "subscription_id": delivery.subscription_id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "url": delivery.url,
        "status": delivery.status,
        "delivered": delivery.status == "delivered",
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at,
        "delivered_at": delivery.delivered_at,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
        "attempt_log": attempts or [],
    }


def to_delivery_out(delivery: WebhookDelivery, attempts: list[AttemptOut] | None = None) -> DeliveryOut:
    return DeliveryOut(**_delivery_fields(delivery, attempts))


async def delivery_detail(session: AsyncSession, organization_id: str, delivery_id: str) -> DeliveryDetailOut:
    delivery = await get_owned(session, WebhookDelivery, delivery_id, organization_id, "Webhook delivery")
    event = await session.get(WebhookEvent, delivery.event_id)
    attempts = await attempts_of(session, [delivery])
    payload = envelope(event, test=delivery.kind == "test") if event is not None else {}
    return DeliveryDetailOut(**_delivery_fields(delivery, attempts.get(delivery.id)), payload=payload)


@dataclass(frozen=True)
class DeliveryFilters:
    subscription_id: str | None = None
    event_type: str | None = None
    status: str | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def deliveries_query(organization_id: str, filters: DeliveryFilters) -> Select[WebhookDelivery]:
    stmt = scoped(WebhookDelivery, organization_id)
    if (value := text_filter(filters.subscription_id, "subscription_id")) is not None:
        stmt = stmt.where(WebhookDelivery.subscription_id == value)
    if filters.event_type is not None:
        stmt = stmt.where(WebhookDelivery.event_type == filters.event_type)
    if filters.status is not None:
        stmt = stmt.where(WebhookDelivery.status == filters.status)
    if filters.kind is not None:
        stmt = stmt.where(WebhookDelivery.kind == filters.kind)
    return created_within(stmt, WebhookDelivery.created_at, filters.since, filters.until)
