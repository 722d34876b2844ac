"""Call records: ``store_call`` stores what the runtime hands over, and the queries on them."""

from __future__ import annotations

import re
import statistics
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import orjson
import structlog
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python
from sqlalchemy import (
    JSON,
    ColumnElement,
    DateTime,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    insert,
    select,
    type_coerce,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.expression import Executable
from ulid import ULID

from parley.auth.principal import OrgContext
from parley.brain import service as brain
from parley.brain.contracts import CallFacts
from parley.calls import analysis
from parley.calls.contracts import (
    VOICE_FIELDS,
    CallRecordIn,
    ToolCallRecord,
    TurnMetrics,
    TurnRecord,
    UsageRecord,
)
from parley.calls.filters import CallFilters
from parley.calls.models import Call
from parley.calls.schemas import CallOut, CallSignalOut, CallSummaryOut, OutboundCallIn, OutboundCallOut
from parley.config import Settings
from parley.flows.definition import AnalysisSettings
from parley.kit.blobs import BlobNotFound, BlobStore, BlobStoreError
from parley.kit.db import UTCDateTime, after_commit, loads_json, plain_insert, read_rows, utcnow
from parley.kit.errors import NotFound, ServiceUnavailable
from parley.kit.jobs import JobQueue, enqueue_after_commit
from parley.kit.pagination import PageParams, bound_keyset, keyset_values, page_of
from parley.kit.ranges import Download, ranged_download
from parley.kit.tenancy import get_owned, scoped
from parley.webhooks.service import PlannedEvent, plan_event, publish_event, queue_deliveries

log = structlog.get_logger("parley.calls")

# Places an outbound phone call (POST /api/calls/outbound). Telephony implements it and the app hands
# it over at start-up (``app.state.outbound_dialer``): calls never import telephony, which builds on them.
Dialer = Callable[[AsyncSession, Settings, OrgContext, OutboundCallIn], Awaitable[OutboundCallOut]]

# Recording names are looked up in the calls table, never joined onto a path.
RECORDING_FILENAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9_.-]{1,196}\.wav$")


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _fit(value: str | None, length: int) -> str | None:
    """Text cut to its column's length, without NUL characters (PostgreSQL refuses them): an odd
    caller id must not lose the whole call."""
    return value.replace("\x00", "")[:length] if value is not None else None


def recording_blob_key(organization_id: str, filename: str) -> str:
    """Where the voice pipeline stores a call's recording (and where the download reads it)."""
    return f"{organization_id}/recordings/{filename}"


def mean_voice_latency(metrics: list[dict[str, Any]]) -> float | None:
    values = [m["voice_to_voice_ms"] for m in metrics if m.get("voice_to_voice_ms") is not None]
    return round(statistics.fmean(values), 1) if values else None


async def _recording_filename(session: AsyncSession, record: CallRecordIn) -> str | None:
    name = record.recording_filename
    if name is None:
        return None
    if not RECORDING_FILENAME.fullmatch(name):
        log.warning("call_recording_name_refused", session_id=record.session_id)
        return None
    if await session.scalar(select(Call.id).where(Call.recording_filename == name)) is not None:
        log.warning("call_recording_name_taken", session_id=record.session_id)
        return None
    return name


# The call row, written with one INSERT built once: the column types convert the values as they would
# for the ORM (JSON through the engine's serializer, times through ``UTCDateTime``), the same columns
# every time (those the record sets; the analysis results stay NULL, as an ORM insert leaves them, and
# created_at/updated_at take their column defaults).
_CALLS = typing.cast(Table, Call.__table__)
_INSERT_CALL = insert(_CALLS)
_JSON_DUMPS = TypeAdapter(list[Any])  # a list of models to JSON-able dicts, in one step


async def record_call(session: AsyncSession, record: CallRecordIn, *, jobs: JobQueue | None = None) -> Call:
    """:func:`store_call`, answering the stored :class:`Call` (read back by its id)."""
    call = await session.get(Call, await store_call(session, record, jobs=jobs))
    assert call is not None
    return call


async def store_call(session: AsyncSession, record: CallRecordIn, *, jobs: JobQueue | None = None) -> str:
    """Store the ended conversation and its brain signals (the record's own and the built-in rules');
    answers the call's id.

    Runs inside the caller's transaction (one INSERT of the call row; the signals are flushed). A
    recording name that is malformed or already taken is left out (logged), never a reason to lose the
    call. With ``jobs`` (the app's runner) and an ``openai`` provider configured, the LLM sentiment
    classifier is queued once the transaction has committed (see :mod:`parley.brain.sentiment`). The
    ``call.ended`` event goes to the organization's webhook subscribers: now, or for a session a voice
    transport serves (``record.voice_connected``) when ``attach_voice`` adds what the transport
    measured (the ``calls.publish_ended`` job sends it without that after
    :data:`ENDED_EVENT_GRACE_SECONDS`); never for the console's ``test`` channel. When the flow declares
    an ``analysis`` block the post-call analysis (:mod:`parley.calls.analysis`) is queued after the
    commit as well.
    """
    return await write_call(session, await plan_call(session, record), jobs=jobs)


@dataclass(frozen=True)
class PlannedCall:
    """A call record made ready to store (:func:`plan_call`): the row's values and what goes with it."""

    values: dict[str, Any]
    raised: list[brain.Raised]
    spec: AnalysisSettings | None

    @property
    def call_id(self) -> str:
        return str(self.values["id"])

    @property
    def organization_id(self) -> str:
        return str(self.values["organization_id"])

    @property
    def sends_events(self) -> bool:
        return sends_events(self.values["channel"])


async def plan_call(session: AsyncSession, record: CallRecordIn) -> PlannedCall:
    """The call row :func:`store_call` writes for ``record``, its brain signals and the flow's analysis
    block; it only reads (``session`` for the recording name, the analysis block: usually cached)."""
    started, ended = _aware(record.started_at), _aware(record.ended_at)
    organization_id = record.organization_id
    metrics: list[dict[str, Any]] = _JSON_DUMPS.dump_python(record.turn_metrics, mode="json")
    filename = await _recording_filename(session, record)
    raised = brain.signals_of(record)
    signal_types = sorted({r.type for r in raised})
    transcript = record.transcript
    if any(transcript[i].index > transcript[i + 1].index for i in range(len(transcript) - 1)):
        transcript = sorted(transcript, key=lambda t: t.index)
    flow_id, flow_version, channel = _fit(record.flow_id, 40), record.flow_version, record.channel
    spec = await analysis.spec_of(session, organization_id, flow_id, flow_version)
    values: dict[str, Any] = {
        "id": f"call_{ULID.from_datetime(started)}",
        "organization_id": organization_id,
        "session_id": _fit(record.session_id, 80) or "",
        "flow_id": flow_id,
        "flow_version": flow_version,
        "channel": channel,
        "direction": record.direction,
        "caller": _fit(record.caller, 200),
        "callee": _fit(record.callee, 200),
        "language": _fit(record.language, 20),
        "started_at": started,
        "ended_at": ended,
        "duration_seconds": max(0.0, (ended - started).total_seconds()),
        "outcome": record.outcome,
        "end_reason": _fit(record.end_reason, 500),
        "transferred_to": _fit(record.transferred_to, 200),
        "transferred_at": record.transferred_at,
        "transfer_status": _fit(record.transfer_status, 20),
        "transcript": _JSON_DUMPS.dump_python(transcript, mode="json"),
        "tool_calls": _JSON_DUMPS.dump_python(record.tool_calls, mode="json"),
        "turn_metrics": metrics,
        "variables": to_jsonable_python(record.variables),
        "turn_count": len(transcript),
        "mean_voice_latency_ms": mean_voice_latency(metrics),
        "llm_prompt_tokens": record.usage.llm_prompt_tokens,
        "llm_completion_tokens": record.usage.llm_completion_tokens,
        "tts_characters": record.usage.tts_characters,
        "stt_seconds": record.usage.stt_seconds,
        # A voice call's call.ended waits for its recording, voice metrics and speech usage
        # (attach_voice); the calls.publish_ended job sends it without them if the transport never reports.
        "ended_event_pending": sends_events(channel) and record.voice_connected,
        "has_signals": bool(signal_types),
        "signal_types": signal_types,
        "recording_filename": filename,
        "blob_key": recording_blob_key(organization_id, filename) if filename else None,
        "analysis_status": "pending" if spec is not None else None,
    }
    return PlannedCall(values, raised, spec)


async def write_call(session: AsyncSession, call: PlannedCall, *, jobs: JobQueue | None = None) -> str:
    """Write a planned call in ``session``'s transaction: the row, its signals, ``call.ended`` (now or
    later), and what is queued after the commit (:func:`store_call`)."""
    call_id, organization_id = call.call_id, call.organization_id
    await session.execute(_INSERT_CALL, call.values)  # before the signals, which reference the call
    await brain.raise_signals(
        session,
        call.raised,
        organization_id=organization_id,
        call_id=call_id,
        flow_id=call.values["flow_id"],
        jobs=jobs,
        publish=call.sends_events,
    )
    if not call.values["ended_event_pending"] and call.sends_events:
        await publish_event(session, organization_id, "call.ended", _ended_data(call.values), jobs=jobs)
    await queue_after_call(session, call, jobs=jobs)
    return call_id


@dataclass(frozen=True)
class PlainCallWrites:
    """What :func:`write_call` would write for a planned call, as plain statements in order (the call
    row, its brain signals with their notification deliveries and events, its ``call.ended`` event and
    deliveries), for ``kit.db.commit_now``; what :func:`queue_after_call` queues after them."""

    steps: list[tuple[Executable, dict[str, Any]]]
    signals: brain.PlannedSignals | None
    ended_event: PlannedEvent | None


async def plain_call_writes(session: AsyncSession, call: PlannedCall) -> PlainCallWrites | None:
    """The planned call's writes as plain statements, or None when one of them needs a look-up in the
    writing transaction (a notification rule with a throttle matches one of its signals). It only
    reads (notification rules and webhook subscriptions, cached). Once they are written:
    :func:`queue_after_call` with them."""
    now = utcnow()
    row = {**call.values, "created_at": now, "updated_at": now}
    steps: list[tuple[Executable, dict[str, Any]]] = [(plain_insert(_CALLS, tuple(row)), row)]
    signals = None
    if call.raised:
        signals = await brain.plan_signals(
            session,
            call.raised,
            organization_id=call.organization_id,
            call_id=call.call_id,
            flow_id=call.values["flow_id"],
            publish=call.sends_events,
            unthrottled_only=True,
        )
        if signals is None:
            return None
        steps += signals.statements
    event = None
    if call.sends_events and not call.values["ended_event_pending"]:
        event = await plan_event(session, call.organization_id, "call.ended", _ended_data(call.values))
        steps += event.statements if event is not None else []
    return PlainCallWrites(steps, signals, event)


async def queue_after_call(
    session: AsyncSession,
    call: PlannedCall,
    *,
    jobs: JobQueue | None = None,
    written: PlainCallWrites | None = None,
) -> None:
    """What a stored call queues once its transaction commits: the deliveries of what was ``written``
    with it as plain statements (its signals' notifications and events, ``call.ended``) or a voice
    call's late ``call.ended``, the sentiment classifier (``jobs`` given, a provider configured) and the
    flow's post-call analysis."""
    call_id = call.call_id
    runner: JobQueue | None = jobs or session.info.get("jobs")
    if written is not None and written.signals is not None:
        brain.queue_after_signals(session, written.signals, jobs=jobs)
    if written is not None and written.ended_event is not None:
        queue_deliveries(session, written.ended_event, jobs=jobs)
    if call.values["ended_event_pending"] and runner is not None:
        # without a queue, the job's recovery picks it up at the next start
        _publish_ended_later(session, runner, call_id)
    if jobs is not None:
        await brain.queue_sentiment(
            session,
            jobs,
            organization_id=call.organization_id,
            call_id=call_id,
            transcript=call.values["transcript"],
        )
    if call.spec is not None and runner is not None:  # without a queue, the job recovery picks it up
        enqueue_after_commit(session, runner, analysis.ANALYZE_JOB, {"call_id": call_id})
    log.info("call_recorded", call_id=call_id, signals=len(call.raised))


# --- call events (docs/webhooks.md) --------------------------------------------------------------

PUBLISH_ENDED_JOB = "calls.publish_ended"
# How long a voice call's call.ended waits for the transport's voice facts before it goes without
# them (the transport attaches them within seconds of the call's end; this covers a crashed process).
ENDED_EVENT_GRACE_SECONDS = 120.0


def sends_events(channel: str) -> bool:
    """Whether a conversation on ``channel`` sends call events: the console's test conversations
    (channel ``test``) never reach the customer's systems (docs/webhooks.md)."""
    return channel != "test"


def _publish_ended_later(session: AsyncSession, jobs: JobQueue, call_id: str) -> None:
    async def enqueue() -> None:
        jobs.enqueue_later(PUBLISH_ENDED_JOB, {"call_id": call_id}, ENDED_EVENT_GRACE_SECONDS)

    after_commit(session, enqueue)


async def publish_ended(session: AsyncSession, call: Call, *, jobs: JobQueue | None = None) -> bool:
    """Send the call's pending ``call.ended`` now, with what the record holds; answers whether it was
    sent. The call row is expected to be locked (or written) by ``session``: sent once, never twice.
    An analysis stored while ``call.ended`` waited sends its ``call.analyzed`` now, after it (the
    analysis job leaves it to this, see ``calls.tasks.analyze``), so a subscriber never hears of a
    call's analysis before its end."""
    if not call.ended_event_pending:
        return False
    call.ended_event_pending = False
    await publish_event(session, call.organization_id, "call.ended", call_ended_data(call), jobs=jobs)
    if call.analysis_status not in (None, "pending"):
        await publish_event(
            session, call.organization_id, "call.analyzed", call_analyzed_data(call), jobs=jobs
        )
    await session.flush()
    return True


# What every call event says of the call besides its id (``_facts``).
_FACT_COLUMNS = (
    "session_id",
    "flow_id",
    "flow_version",
    "channel",
    "direction",
    "caller",
    "callee",
    "started_at",
)


def _facts(values: dict[str, Any]) -> dict[str, Any]:
    """The call's facts from its column values: ``call_id`` and :data:`_FACT_COLUMNS`."""
    return {"call_id": values["id"], **{name: values[name] for name in _FACT_COLUMNS}}


def _call_facts(call: Call) -> dict[str, Any]:
    return _facts({name: getattr(call, name) for name in ("id", *_FACT_COLUMNS)})


# The columns call.ended carries (``_ended_data``).
_ENDED_COLUMNS = (
    "id",
    "session_id",
    "flow_id",
    "flow_version",
    "channel",
    "direction",
    "caller",
    "callee",
    "started_at",
    "ended_at",
    "duration_seconds",
    "outcome",
    "end_reason",
    "transferred_to",
    "transfer_status",
    "language",
    "transcript",
    "variables",
    "tool_calls",
    "signal_types",
    "turn_count",
    "mean_voice_latency_ms",
    "turn_metrics",
    "llm_prompt_tokens",
    "llm_completion_tokens",
    "tts_characters",
    "stt_seconds",
    "recording_filename",
)


def call_ended_data(call: Call) -> dict[str, Any]:
    """What ``call.ended`` carries: the record as it is when the conversation ends."""
    return _ended_data({name: getattr(call, name) for name in _ENDED_COLUMNS})


def _ended_data(call: dict[str, Any]) -> dict[str, Any]:
    """``call.ended``'s data from the call's column values (the row as ``store_call`` writes it)."""
    filename = call["recording_filename"]
    return {
        **_facts(call),
        "ended_at": call["ended_at"],
        "duration_seconds": call["duration_seconds"],
        "outcome": call["outcome"],
        "end_reason": call["end_reason"],
        "transferred_to": call["transferred_to"],
        "transfer_status": call["transfer_status"],
        "language": call["language"],
        "transcript": call["transcript"],
        "variables": call["variables"],
        "tool_calls": call["tool_calls"],
        "signal_types": call["signal_types"],
        "metrics": {
            "turn_count": call["turn_count"],
            "mean_voice_latency_ms": call["mean_voice_latency_ms"],
            "turns": call["turn_metrics"],
            "usage": {
                "llm_prompt_tokens": call["llm_prompt_tokens"],
                "llm_completion_tokens": call["llm_completion_tokens"],
                "tts_characters": call["tts_characters"],
                "stt_seconds": call["stt_seconds"],
            },
        },
        "recording_url": _recording_url(filename),
    }


def call_analyzed_data(call: Call) -> dict[str, Any]:
    return {
        **_call_facts(call),
        "ended_at": call.ended_at,
        "outcome": call.outcome,
        "analysis_status": call.analysis_status,
        "analysis_method": call.analysis_method,
        "summary": call.summary,
        "extracted": call.extracted,
        "analyzed_at": call.analyzed_at,
        "recording_url": recording_url(call),
    }


async def publish_call_started(
    session: AsyncSession,
    *,
    organization_id: str,
    session_id: str,
    flow_id: str | None,
    flow_version: int | None,
    channel: str,
    direction: str,
    caller: str | None,
    callee: str | None,
    started_at: datetime,
) -> None:
    """Send ``call.started`` to the organization's subscribers once the new session is committed (the
    runtime calls this where it writes the session; there is no call record yet, so ``call_id`` is
    null and ``session_id`` links it to the later ``call.ended``). Only flushes."""
    if not sends_events(channel):
        return
    data = {
        "call_id": None,
        "session_id": session_id,
        "flow_id": flow_id,
        "flow_version": flow_version,
        "channel": channel,
        "direction": direction,
        "caller": caller,
        "callee": callee,
        "started_at": _aware(started_at),
    }
    await publish_event(session, organization_id, "call.started", data)


# --- post-call analysis (parley.calls.analysis) --------------------------------------------------


def store_analysis(
    call: Call, *, summary: str | None, extracted: dict[str, Any], method: str, status: str = "done"
) -> None:
    call.summary = summary
    call.extracted = extracted
    call.extracted_index = analysis.index_of(extracted)
    call.analysis_method = method
    call.analysis_status = status
    call.analyzed_at = utcnow()


class CallsForTheBrain:
    """What the brain's jobs may read of a call and mark on it (:class:`parley.brain.contracts.SignalledCalls`)."""

    async def facts(self, session: AsyncSession, call_id: str) -> CallFacts | None:
        call = await session.scalar(select(Call).where(Call.id == call_id))
        if call is None:
            return None
        return CallFacts(
            call.id,
            call.organization_id,
            call.flow_id,
            call.ended_at,
            call.transcript,
            sends_events=sends_events(call.channel),
        )

    async def note_signal(self, session: AsyncSession, call_id: str, signal_type: str) -> None:
        call = await session.scalar(select(Call).where(Call.id == call_id))
        if call is not None:
            call.has_signals = True
            call.signal_types = sorted({*call.signal_types, signal_type})


VOICE_METRICS = VOICE_FIELDS  # the name other modules import


async def call_of_session(session: AsyncSession, organization_id: str, session_id: str) -> Call | None:
    return await session.scalar(scoped(Call, organization_id).where(Call.session_id == session_id))


async def attach_voice(
    session: AsyncSession,
    organization_id: str,
    session_id: str,
    *,
    metrics: list[dict[str, Any]],
    recording_filename: str | None = None,
    tts_characters: int | None = None,
    stt_seconds: float | None = None,
) -> Call | None:
    """Add what the voice pipeline measured and recorded to the call record of an ended session.

    The call record is written when the session ends (inside the turn that ends it), before the
    pipeline has spoken the last answer or closed the recording; the transport calls this afterwards.
    ``metrics`` are dicts with ``turn_index`` and the voice fields of :class:`TurnMetrics`; they are
    merged into the entry of the same ``turn_index`` (an entry is added when the engine made none).
    ``tts_characters`` and ``stt_seconds`` are the whole call's speech usage as the pipeline measured
    it (they replace the record's; a text session's record keeps null).
    A voice call's pending ``call.ended`` is published here, in the same unit of work, with all of it
    (the call row is locked first, so the event goes once even if ``calls.publish_ended`` runs now).
    Answers the call, or None when the session has no call record (yet). Only flushes.
    """
    call = await session.scalar(
        scoped(Call, organization_id).where(Call.session_id == session_id).with_for_update()
    )
    if call is None:
        return None
    if tts_characters is not None:
        call.tts_characters = tts_characters
    if stt_seconds is not None:
        call.stt_seconds = round(stt_seconds, 3)
    merged = [dict(m) for m in call.turn_metrics]
    by_index = {m.get("turn_index"): m for m in merged}
    for measured in metrics:
        index = measured.get("turn_index")
        if not isinstance(index, int):
            continue
        entry = by_index.get(index)
        if entry is None:
            entry = TurnMetrics(
                turn_index=index, engine_ms=float(measured.get("engine_ms") or 0.0)
            ).model_dump(mode="json")
            merged.append(entry)
            by_index[index] = entry
        for key in VOICE_METRICS:
            value = measured.get(key)
            if value is not None and (key != "llm_first_token_ms" or entry.get(key) is None):
                entry[key] = value
    merged.sort(key=lambda m: int(m.get("turn_index") or 0))
    call.turn_metrics = [TurnMetrics.model_validate(m).model_dump(mode="json") for m in merged]
    call.mean_voice_latency_ms = mean_voice_latency(call.turn_metrics)
    if recording_filename is not None and call.recording_filename is None:
        if (
            RECORDING_FILENAME.fullmatch(recording_filename)
            and (await session.scalar(select(Call.id).where(Call.recording_filename == recording_filename)))
            is None
        ):
            call.recording_filename = recording_filename
            call.blob_key = recording_blob_key(organization_id, recording_filename)
        else:
            log.warning("call_recording_name_refused", session_id=session_id)
    await session.flush()
    await publish_ended(session, call)
    return call


# --- reading -----------------------------------------------------------------------------------


def recording_url(call: Call) -> str | None:
    return _recording_url(call.recording_filename)


def _recording_url(filename: str | None) -> str | None:
    return f"/api/calls/recording-file/{filename}" if filename else None


async def get_call(session: AsyncSession, context: OrgContext, call_id: str) -> Call:
    return await get_owned(session, Call, call_id, context.organization_id, "Call")


async def to_full(session: AsyncSession, call: Call) -> CallOut:
    signals = await brain.signals_of_call(session, call.organization_id, call.id)
    return CallOut(
        **CallSummaryOut.model_validate(call).model_dump(),
        session_id=call.session_id,
        callee=call.callee,
        language=call.language,
        end_reason=call.end_reason,
        transferred_to=call.transferred_to,
        transferred_at=call.transferred_at,
        transfer_status=call.transfer_status,
        transcript=[TurnRecord.model_validate(t) for t in call.transcript],
        tool_calls=[ToolCallRecord.model_validate(t) for t in call.tool_calls],
        turn_metrics=[TurnMetrics.model_validate(m) for m in call.turn_metrics],
        usage=UsageRecord(
            llm_prompt_tokens=call.llm_prompt_tokens,
            llm_completion_tokens=call.llm_completion_tokens,
            tts_characters=call.tts_characters,
            stt_seconds=call.stt_seconds,
        ),
        variables=call.variables,
        signals=[CallSignalOut.model_validate(s) for s in signals],
        recording_url=recording_url(call),
        created_at=call.created_at,
        analysis_method=call.analysis_method,
        analyzed_at=call.analyzed_at,
    )


async def open_recording(
    session: AsyncSession, blobs: BlobStore, context: OrgContext, filename: str, range_header: str | None
) -> Download:
    """The recording named ``filename`` of one of the organization's calls; the name is only ever a
    lookup key in the calls table, never part of a path."""
    missing = NotFound(f"No recording named {filename!r} exists in this organization.")
    if not RECORDING_FILENAME.fullmatch(filename):
        raise missing
    call = await session.scalar(
        scoped(Call, context.organization_id).where(Call.recording_filename == filename)
    )
    if call is None or call.blob_key is None:
        raise missing
    try:
        size = await blobs.size(call.blob_key)
    except BlobNotFound as exc:
        log.warning("call_recording_missing", call_id=call.id)
        raise missing from exc
    except BlobStoreError as exc:
        raise ServiceUnavailable("The file storage is unavailable; try again later.") from exc
    return ranged_download(
        blobs,
        call.blob_key,
        size,
        range_header,
        "recording",
        {"Content-Disposition": f'attachment; filename="{filename}"'},
    )


# What a list item shows, and only that, in the response model's order: the transcript, tool calls,
# metrics and variables (big JSON documents) are never read for a list. Table columns, not the ORM's
# attributes: a select of them runs as a plain Core statement, without the ORM's per-statement work.
_SUMMARY_FIELDS = tuple(CallSummaryOut.model_fields)


def _summary_column(name: str) -> ColumnElement[Any]:
    """A summary column as the list reads it: its times as the driver gives them (naive UTC on SQLite,
    which orjson writes as UTC with ``OPT_NAIVE_UTC``), without ``UTCDateTime``'s per-value step; its
    JSON as the text the database holds (``_json_items`` reads it), without the JSON type's steps (on
    PostgreSQL the driver would decode it before SQLAlchemy sees it: the cast makes it text)."""
    column: ColumnElement[Any] = Call.__table__.c[name]
    if isinstance(column.type, UTCDateTime):
        return type_coerce(column, DateTime(timezone=True)).label(name)
    if isinstance(column.type, JSON):
        return cast(column, Text).label(name)
    return column


_SUMMARY_COLUMNS = [_summary_column(name) for name in _SUMMARY_FIELDS]
_ID = _SUMMARY_FIELDS.index("id")
_SIGNAL_TYPES = _SUMMARY_FIELDS.index("signal_types")
_EXTRACTED = _SUMMARY_FIELDS.index("extracted")
_LIST_JSON = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC | orjson.OPT_NON_STR_KEYS

# A call's signal types as the list writes them, by the text the column holds. Few distinct values (sorted
# sets of the brain's signal types: most calls have none or one), so each is decoded and encoded once,
# by the same functions as every other JSON column and the response, and then only looked up.
_SIGNAL_TYPES_JSON: dict[str, orjson.Fragment] = {}
_SIGNAL_TYPES_KEPT = 1024  # distinct values kept; past that the cache starts again


def _signal_types_json(text: str) -> orjson.Fragment:
    fragment = _SIGNAL_TYPES_JSON.get(text)
    if fragment is None:
        fragment = orjson.Fragment(orjson.dumps(loads_json(text), option=_LIST_JSON))
        if len(_SIGNAL_TYPES_JSON) >= _SIGNAL_TYPES_KEPT:
            _SIGNAL_TYPES_JSON.clear()
        _SIGNAL_TYPES_JSON[text] = fragment
    return fragment


def _json_items(rows: list[Any]) -> list[dict[str, Any]]:
    """The list's items: each row's columns by name, its JSON columns decoded (``extracted``, one per
    analysed call) or looked up (``signal_types``)."""
    items = []
    for row in rows:
        item = dict(zip(_SUMMARY_FIELDS, row, strict=True))
        item["signal_types"] = _signal_types_json(row[_SIGNAL_TYPES])
        if (extracted := row[_EXTRACTED]) is not None:
            item["extracted"] = loads_json(extracted)
        items.append(item)
    return items


# The list's statements by shape (which filters are set, whether a cursor is): built once, values bound
# per request, so a request neither builds a statement nor works out its cache key. At most a few
# thousand shapes; ones with analysis filters (any field names) are built per request instead.
_LIST_STATEMENTS: dict[tuple[Any, ...], Select[Any]] = {}


def _list_statement(filters: CallFilters, after: bool) -> Select[Any]:
    shape = (filters.shape(), after)
    statement = _LIST_STATEMENTS.get(shape)
    if statement is None:
        calls = Call.__table__.c
        statement = bound_keyset(
            filters.apply(
                select(*_SUMMARY_COLUMNS).where(calls.organization_id == bindparam("organization_id"))
            ),
            calls.id,
            after=after,
        )
        if not filters.analysis:
            _LIST_STATEMENTS[shape] = statement
    return statement


async def list_calls(
    session: AsyncSession, organization_id: str, filters: CallFilters, page: PageParams
) -> bytes:
    """A page of the organization's calls matching the list filters (``CallFilter`` of the routers),
    newest first, as the JSON of ``Page[CallSummaryOut]``: one query of the summary columns, walked
    in the (organization_id, id) index.

    The columns hold what ``record_call`` stored from a validated record, so they are rendered as they
    come, not validated into models first: orjson writes the same bytes as the response model would
    (UTC times with ``Z``; tests/calls/test_list.py compares them).
    """
    values = {"organization_id": organization_id, **filters.values(), **keyset_values(page)}
    found = await read_rows(session, _list_statement(filters, page.after_id is not None), values)
    rows, cursor = page_of(found, page, itemgetter(_ID))
    return orjson.dumps({"items": _json_items(rows), "next_cursor": cursor}, option=_LIST_JSON)
