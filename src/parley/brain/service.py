"""The brain: it judges finished conversations and owns the signals they raise.

``calls`` hands each stored call over (:func:`signals_of` before the row is written, :func:`raise_signals`
after); the brain runs its rules (:mod:`parley.brain.rules`), writes the signals, hands them to
notifications, and queues the LLM sentiment classifier (:mod:`parley.brain.tasks`). The brain reads a
stored call only through :class:`parley.brain.contracts.SignalledCalls`, never calls' rows or services.
People work the signals through open → acknowledged → resolved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from pydantic_core import to_jsonable_python
from sqlalchemy import Select, Table
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable

from parley.auth.principal import OrgContext
from parley.brain import rules, sentiment
from parley.brain.contracts import FinishedConversation
from parley.brain.models import BrainSignal
from parley.brain.schemas import SignalUpdate
from parley.kit.db import after_commit, plain_insert, utcnow
from parley.kit.errors import Conflict
from parley.kit.filters import as_utc, text_filter
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue
from parley.kit.tenancy import get_owned, scoped
from parley.notifications.messages import RaisedSignal
from parley.notifications.service import PlannedNotifications, plan_notifications, queue_notifications
from parley.webhooks.service import PlannedEvent, plan_event, queue_deliveries

# Which status a signal may move to from each status.
TRANSITIONS = {
    "open": {"acknowledged", "resolved"},
    "acknowledged": {"resolved"},
    "resolved": set[str](),
}


async def get_signal(session: AsyncSession, context: OrgContext, signal_id: str) -> BrainSignal:
    return await get_owned(session, BrainSignal, signal_id, context.organization_id, "Brain signal")


async def update_signal(
    session: AsyncSession, context: OrgContext, signal_id: str, data: SignalUpdate
) -> BrainSignal:
    signal = await get_signal(session, context, signal_id)
    if data.status not in TRANSITIONS[signal.status]:
        allowed = sorted(TRANSITIONS[signal.status])
        next_steps = f"it can only become {' or '.join(allowed)}" if allowed else "it cannot change any more"
        raise Conflict(f"Brain signal {signal.id!r} is {signal.status}; {next_steps}.")
    now = utcnow()
    if data.status == "acknowledged":
        signal.acknowledged_by, signal.acknowledged_at = context.principal.id, now
    else:
        signal.resolved_by, signal.resolved_at = context.principal.id, now
    signal.status = data.status
    if data.note is not None:
        signal.note = data.note
    await session.flush()
    return signal


@dataclass(frozen=True)
class SignalFilters:
    type: str | None = None
    severity: str | None = None
    status: str | None = None
    call_id: str | None = None
    flow_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def signals_query(organization_id: str, filters: SignalFilters) -> Select[BrainSignal]:
    """The organization's signals matching ``filters``; ``since``/``until`` apply to when they were stored."""
    stmt = scoped(BrainSignal, organization_id)
    if (value := text_filter(filters.type, "type")) is not None:
        stmt = stmt.where(BrainSignal.type == value)
    if filters.severity is not None:
        stmt = stmt.where(BrainSignal.severity == filters.severity)
    if filters.status is not None:
        stmt = stmt.where(BrainSignal.status == filters.status)
    if (value := text_filter(filters.call_id, "call_id")) is not None:
        stmt = stmt.where(BrainSignal.call_id == value)
    if (value := text_filter(filters.flow_id, "flow_id")) is not None:
        stmt = stmt.where(BrainSignal.flow_id == value)
    if (start := as_utc(filters.since, "since")) is not None:
        stmt = stmt.where(BrainSignal.created_at >= start)
    if (end := as_utc(filters.until, "until")) is not None:
        stmt = stmt.where(BrainSignal.created_at < end)
    return stmt


# --- raising ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raised:
    """A signal about to be stored: the record's own (flow, runtime) or a built-in rule's."""

    type: str
    severity: str
    source: str
    details: dict[str, Any]
    at: datetime


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def signals_of(record: FinishedConversation) -> list[Raised]:
    """The record's own signals, then what the built-in rules find in it (stamped with the end).

    One event raises one signal: a rule stays quiet about a type the flow or the runtime already
    raised on this call (the demo flow's ``order_not_found`` node and the rule that reads the same 404).
    """
    ended = _aware(record.ended_at)
    raised = [
        Raised(s.type, s.severity, s.source, to_jsonable_python(s.details), _aware(s.at))
        for s in record.signals
    ]
    own = {s.type for s in record.signals}
    raised += [
        Raised(rule.type, rule.severity, "rule", to_jsonable_python(finding.details), ended)
        for rule, finding in rules.evaluate(record)
        if rule.type not in own
    ]
    return raised


@dataclass(frozen=True)
class _NewSignal:
    """A signal row about to be written: what notifications and the ``signal.raised`` event read of it."""

    id: str
    organization_id: str
    call_id: str | None
    flow_id: str | None
    type: str
    severity: str
    status: str
    source: str
    details: dict[str, Any]
    occurred_at: datetime


@dataclass(frozen=True)
class PlannedSignals:
    """New signals (:func:`plan_signals`): their rows, their notification deliveries and their
    ``signal.raised`` events, as statements in order, and what is queued after the commit."""

    statements: list[tuple[Executable, dict[str, Any]]]
    notifications: PlannedNotifications
    events: list[PlannedEvent]


_SIGNALS = cast(Table, BrainSignal.__table__)


async def plan_signals(
    session: AsyncSession,
    raised: Sequence[Raised],
    *,
    organization_id: str,
    call_id: str,
    flow_id: str | None,
    publish: bool = True,
    unthrottled_only: bool = False,
) -> PlannedSignals | None:
    """The signals of a stored call as statements: each row, the deliveries of the notification rules
    it matches, and (not with ``publish=False``, a console test conversation's) a ``signal.raised``
    event for the webhook subscribers. It only reads (rules and subscriptions, cached); with
    ``unthrottled_only`` a matching throttled rule answers None (see ``plan_notifications``)."""
    now = utcnow()
    signals = [
        _NewSignal(
            id=new_id("sig"),
            organization_id=organization_id,
            call_id=call_id,
            flow_id=flow_id,
            type=r.type,
            severity=r.severity,
            status="open",
            source=r.source,
            details=r.details,
            occurred_at=r.at,
        )
        for r in raised
    ]
    notifications = await plan_notifications(session, signals, unthrottled_only=unthrottled_only)
    if notifications is None:
        return None
    statements: list[tuple[Executable, dict[str, Any]]] = []
    for signal in signals:
        row = {**vars(signal), "created_at": now, "updated_at": now}
        statements.append((plain_insert(_SIGNALS, tuple(row)), row))
    statements += notifications.statements
    events = []
    for signal in signals if publish else []:
        event = await plan_event(session, organization_id, "signal.raised", signal_event_data(signal))
        if event is not None:
            events.append(event)
            statements += event.statements
    return PlannedSignals(statements, notifications, events)


def queue_after_signals(
    session: AsyncSession, planned: PlannedSignals, *, jobs: JobQueue | None = None
) -> None:
    """Queue the planned signals' notification and webhook deliveries once ``session`` commits."""
    queue_notifications(session, planned.notifications, jobs=jobs)
    for event in planned.events:
        queue_deliveries(session, event, jobs=jobs)


async def raise_signals(
    session: AsyncSession,
    raised: Sequence[Raised],
    *,
    organization_id: str,
    call_id: str,
    flow_id: str | None,
    jobs: JobQueue | None = None,
    publish: bool = True,
) -> None:
    """Store the signals of a stored call in ``session``'s transaction and hand them to notifications
    and to webhook subscribers (``signal.raised``; not with ``publish=False``, a console test
    conversation's): :func:`plan_signals`, written, queued after the commit."""
    if not raised:
        return
    planned = await plan_signals(
        session, raised, organization_id=organization_id, call_id=call_id, flow_id=flow_id, publish=publish
    )
    assert planned is not None  # throttles are looked up in the transaction
    for statement, values in planned.statements:
        await session.execute(statement, values)
    queue_after_signals(session, planned, jobs=jobs)


def signal_event_data(signal: RaisedSignal) -> dict[str, Any]:
    return {
        "signal_id": signal.id,
        "type": signal.type,
        "severity": signal.severity,
        "source": signal.source,
        "status": signal.status,
        "call_id": signal.call_id,
        "flow_id": signal.flow_id,
        "details": to_jsonable_python(signal.details),
        "occurred_at": signal.occurred_at,
    }


async def signals_of_call(session: AsyncSession, organization_id: str, call_id: str) -> Sequence[BrainSignal]:
    rows = await session.scalars(
        scoped(BrainSignal, organization_id).where(BrainSignal.call_id == call_id).order_by(BrainSignal.id)
    )
    return rows.all()


async def queue_sentiment(
    session: AsyncSession,
    jobs: JobQueue,
    *,
    organization_id: str,
    call_id: str,
    transcript: list[dict[str, Any]],
) -> None:
    """Queue the LLM sentiment classifier after the commit, when there is something to classify."""
    if not any(t.get("speaker") == "caller" for t in transcript):
        return
    if not await sentiment.has_provider(session, organization_id):
        return
    payload = {"call_id": call_id}

    async def enqueue() -> None:
        await jobs.submit(sentiment.SENTIMENT_JOB, payload)

    after_commit(session, enqueue)
