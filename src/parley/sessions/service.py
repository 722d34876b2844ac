"""Sessions: run the flow engine over a stored conversation, one turn per request.

State lives in ``conversation_sessions`` (JSON), so any process can continue a session. Turns of one
session are serialized by an in-process lock (see :mod:`parley.sessions.locks`) and, across
processes, by the optimistic ``version`` check on every write (a turn's ``UPDATE ... WHERE version``;
the ORM's check, after a row lock on PostgreSQL, where a whole row is written). When a
session ends (the flow ends, ``/end``, the idle sweeper, a failure) its call record is written in the
same transaction via ``parley.calls.service.store_call``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast

import structlog
from pydantic import ValidationError
from sqlalchemy import Row, Select, Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from parley.auth.principal import OrgContext
from parley.calls.contracts import CallRecordIn, Direction
from parley.calls.service import (
    plain_call_writes,
    plan_call,
    publish_call_started,
    queue_after_call,
    store_call,
)
from parley.config import Settings
from parley.flows.definition import FlowDefinition
from parley.flows.models import Flow, FlowVersion
from parley.kit.db import Database, commit_now, read_rows_beside, short_read, unit_of_work, utcnow
from parley.kit.errors import Conflict, NotFound
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue
from parley.kit.prepared import one_row
from parley.kit.redaction import Redactor
from parley.kit.tenancy import get_owned, read_owned, scoped
from parley.privacy import service as privacy
from parley.providers.service import is_configured
from parley.runtime.adapters import PlatformKnowledge, PlatformLlm, PlatformTools
from parley.runtime.engine import FlowEngine, TextSink, TurnResult
from parley.runtime.ports import CallControlPort
from parley.runtime.state import ConversationState
from parley.sessions import locks
from parley.sessions import privacy as _personal_data  # noqa: F401  (registers the sessions' personal data)
from parley.sessions.models import ConversationSession, SessionFacts, SessionSnapshot
from parley.sessions.schemas import (
    AgentEventOut,
    LiveSessionOut,
    SessionCreate,
    SessionOut,
    SessionTurnOut,
    TurnOut,
)

log = structlog.get_logger("parley.sessions")

# Published versions never change, so their parsed definitions are kept (bounded) per process.
_DEFINITIONS: OrderedDict[tuple[str, int], FlowDefinition] = OrderedDict()
_DEFINITION_CACHE_SIZE = 256


class SessionEnded(Conflict):
    code = "session_ended"


# --- loading -------------------------------------------------------------------------------------


def _parse(raw: dict[str, Any], what: str) -> FlowDefinition:
    try:
        return FlowDefinition.model_validate(raw)
    except ValidationError as exc:
        raise Conflict(f"The {what} is not a valid flow definition; fix and publish it again.") from exc


async def _published(
    session: AsyncSession, organization_id: str, flow_id: str, number: int
) -> FlowDefinition:
    key = (flow_id, number)
    cached = _DEFINITIONS.get(key)
    if cached is not None:
        _DEFINITIONS.move_to_end(key)
        return cached
    row = await session.scalar(
        scoped(FlowVersion, organization_id).where(
            FlowVersion.flow_id == flow_id, FlowVersion.version == number
        )
    )
    if row is None:
        raise NotFound(f"Version {number} of flow {flow_id!r} was not found.")
    definition = _parse(row.definition, f"published version {number}")
    _DEFINITIONS[key] = definition
    if len(_DEFINITIONS) > _DEFINITION_CACHE_SIZE:
        _DEFINITIONS.popitem(last=False)
    return definition


async def _definition_of(session: AsyncSession, row: SessionFacts) -> FlowDefinition:
    if row.flow_id is None:
        raise NotFound("The session's flow no longer exists.")
    if row.flow_version is not None:
        return await _published(session, row.organization_id, row.flow_id, row.flow_version)
    flow = await get_owned(session, Flow, row.flow_id, row.organization_id, "Flow")
    return _parse(flow.definition, "flow's draft")


async def definition_of(session: AsyncSession, row: SessionFacts) -> FlowDefinition:
    """The flow definition a session runs: its published version, or the flow's draft (404, 409)."""
    return await _definition_of(session, row)


PhoneLines = Callable[[AsyncSession, Settings, str, str, str], CallControlPort]
_phone_lines: PhoneLines | None = None


def use_phone_lines(factory: PhoneLines) -> None:
    """Telephony hands over its phone line at start-up (``parley.app``): it builds on sessions, so
    sessions cannot import it. Without one, a transfer answers ``unavailable`` (no line)."""
    global _phone_lines
    _phone_lines = factory


def _line(
    session: AsyncSession, settings: Settings, organization_id: str, session_id: str, channel: str
) -> CallControlPort | None:
    if _phone_lines is None:
        return None
    return _phone_lines(session, settings, organization_id, session_id, channel)


async def _engine(
    reader: AsyncSession,
    session: AsyncSession,
    settings: Settings,
    context: OrgContext,
    definition: FlowDefinition,
    line: CallControlPort | None = None,
) -> tuple[FlowEngine, PlatformLlm | None]:
    organization_id = context.organization_id
    llm: PlatformLlm | None = None
    # Only flows that may talk to the model look for a provider; without one, knowledge nodes answer
    # from the hits and llm nodes say the fallback line.
    if any(node.type in ("llm", "knowledge") for node in definition.nodes) and await is_configured(
        reader, organization_id, "openai"
    ):
        llm = PlatformLlm(session, settings, context)
    tools = PlatformTools(session, settings, organization_id)
    refs = [node.tool for node in definition.nodes if node.type == "tool"]
    refs += [ref for node in definition.nodes if node.type == "llm" for ref in node.tools]
    await tools.preload(reader, refs)
    engine = FlowEngine(
        definition,
        tools=tools,
        knowledge=PlatformKnowledge(session, organization_id),
        llm=llm,
        calls=line,
    )
    return engine, llm


async def read_session(session: AsyncSession, organization_id: str, session_id: str) -> Row[Any]:
    """The session's row, to answer it (read only)."""
    return await read_owned(session, ConversationSession, session_id, organization_id, "Session")


async def get_session(
    session: AsyncSession, organization_id: str, session_id: str, *, lock: bool = False
) -> ConversationSession:
    return await get_owned(session, ConversationSession, session_id, organization_id, "Session", lock=lock)


def _state(row: SessionFacts) -> ConversationState:
    return ConversationState.from_json(row.state)


# --- writing -------------------------------------------------------------------------------------


def _stored(state: ConversationState, redactor: Redactor | None) -> ConversationState:
    # With redaction on, personal data is replaced before anything of the conversation is written:
    # the stored state (transcript, tool calls, the LLM's messages) and the call record built from it.
    if redactor is None:
        return state
    return ConversationState.from_json(
        privacy.redact_state(redactor, state.to_json(), ended=state.status == "ended")
    )


async def _save(
    session: AsyncSession, row: ConversationSession, state: ConversationState, llm: PlatformLlm | None
) -> None:
    now = utcnow()
    state = _stored(state, await privacy.redactor_for(session, row.organization_id))
    row.state = state.to_json()
    row.last_activity_at = now
    row.language = str(state.variables.get("language") or row.language or "")[:10] or None
    if llm is not None:
        session.add_all(llm.usage_rows)
        llm.usage_rows = []
    if state.status == "ended" and row.status != "ended":
        row.status = "ended"
        row.outcome = state.outcome
        row.end_reason = (state.end_reason or "")[:60] or None
        row.ended_at = now
        await store_call(session, call_record(row, state), jobs=session.info.get("jobs"))
    try:
        await session.flush()
    except StaleDataError as exc:
        raise Conflict("The session was changed by another request at the same time; send it again.") from exc


def call_record(row: SessionFacts, state: ConversationState) -> CallRecordIn:
    ended = row.ended_at or utcnow()
    return CallRecordIn(
        organization_id=row.organization_id,
        session_id=row.id,
        flow_id=row.flow_id,
        flow_version=row.flow_version,
        channel=row.channel,
        direction="outbound" if row.direction == "outbound" else "inbound",
        voice_connected=bool(row.voice_connected),  # None until the new row is flushed
        caller=row.caller,
        callee=row.callee,
        language=row.language,
        started_at=row.started_at,
        ended_at=ended,
        outcome=state.outcome or "completed",
        end_reason=state.end_reason,
        transcript=state.transcript,
        tool_calls=state.tool_calls,
        turn_metrics=state.metrics,
        usage=state.usage,
        signals=state.signals,
        variables=state.variables,
        transferred_to=state.transferred_to,
        transferred_at=state.transferred_at,
        transfer_status=state.transfer.status if state.transfer is not None else None,
    )


async def create_session(
    session: AsyncSession,
    settings: Settings,
    context: OrgContext,
    data: SessionCreate,
    *,
    direction: Direction = "inbound",
    before_write: Callable[[SessionFacts], None] | None = None,
    commit_at_once: bool = False,
) -> tuple[SessionFacts, TurnResult]:
    """Start a session. The flow is read in a short read of its own and the opening turn runs with no
    transaction open; only the new row is written to ``session``. ``direction`` is ``outbound`` when
    the platform dials (``telephony.service.place_outbound_call``, campaigns): the call record and the
    call events carry it. ``before_write(row)`` runs just before the row is written (the HTTP route
    names it for the audit event). ``commit_at_once``: the caller writes nothing after this, so the row
    may be committed with the request's audit event at once (``kit.db.commit_now``; the sessions
    route). What it returns is for reading (as :func:`send_message`)."""
    async with short_read(session) as reader:
        opened, state, engine, llm = await _prepare(reader, session, settings, context, data)
        redactor = await privacy.redactor_for(reader, context.organization_id)
    opened.direction = direction
    result = await engine.start(state)
    await publish_call_started(
        session,
        organization_id=opened.organization_id,
        session_id=opened.id,
        flow_id=opened.flow_id,
        flow_version=opened.flow_version,
        channel=opened.channel,
        direction=direction,
        caller=opened.caller,
        callee=opened.callee,
        started_at=opened.started_at,
    )
    if state.status != "ended" and (llm is None or not llm.usage_rows):
        # The usual opening: one INSERT of the row as it is now (no ORM object, no flush).
        stored = _stored(state, redactor)
        opened.state = stored.to_json()
        opened.language = str(stored.variables.get("language") or opened.language or "")[:10] or None
        if before_write is not None:
            before_write(opened)
        # Committed at once with the request's audit event where nothing else is written (no call.started
        # subscriber): kit.db.commit_now.
        if not commit_at_once or await commit_now(session, _INSERT_SESSION, opened.values()) is None:
            await session.execute(_INSERT_SESSION, opened.values())
        return opened, result
    # The flow ended at once (its call record is written with it) or the model's usage is to be stored.
    if before_write is not None:
        before_write(opened)
    row = ConversationSession(**opened.values())
    session.add(row)
    await _save(session, row, state, llm)
    return row, result


_FLOWS = cast(Table, Flow.__table__)
# What an opening needs of its flow (not the draft's definition, read only for the test channel).
_FLOW_HEAD = one_row(
    select(_FLOWS.c.id, _FLOWS.c.latest_version).where(
        _FLOWS.c.organization_id == bindparam("in_organization"), _FLOWS.c.id == bindparam("in_flow")
    )
)


async def _flow_head(session: AsyncSession, organization_id: str, flow_id: str) -> Row[Any]:
    """The flow's id and latest version, read beside ``session``'s transaction (404)."""
    rows = await read_rows_beside(
        session, _FLOW_HEAD, {"in_organization": organization_id, "in_flow": flow_id}
    )
    if not rows:
        raise NotFound(f"Flow {flow_id!r} was not found in this organization.")
    return rows[0]


async def _prepare(
    reader: AsyncSession, session: AsyncSession, settings: Settings, context: OrgContext, data: SessionCreate
) -> tuple[SessionSnapshot, ConversationState, FlowEngine, PlatformLlm | None]:
    flow = await _flow_head(session, context.organization_id, data.flow_id)
    version: int | None
    if data.draft and data.channel != "test":
        raise Conflict("Only sessions on the test channel may run a flow's draft.")
    if data.version is not None:
        version = data.version
        definition = await _published(reader, context.organization_id, flow.id, version)
    elif data.channel == "test" and (data.draft or flow.latest_version is None):
        version = None
        draft = await get_owned(reader, Flow, flow.id, context.organization_id, "Flow")
        definition = _parse(draft.definition, "flow's draft")
    elif flow.latest_version is None:
        raise Conflict(
            f"Flow {flow.id!r} has no published version yet; publish it first "
            "(POST /api/flows/{flowId}/publish) or use channel 'test' to try the draft."
        )
    else:
        version = flow.latest_version
        definition = await _published(reader, context.organization_id, flow.id, version)

    session_id = new_id("ses")
    line = _line(session, settings, context.organization_id, session_id, data.channel)
    engine, llm = await _engine(reader, session, settings, context, definition, line)
    state = engine.new_state(
        session_id=session_id,
        channel=data.channel,
        caller=data.caller,
        callee=data.callee,
        variables=data.variables,
    )
    now = utcnow()
    opened = SessionSnapshot(
        id=session_id,
        organization_id=context.organization_id,
        flow_id=flow.id,
        flow_version=version,
        channel=data.channel,
        direction="inbound",
        voiced=data.voiced,
        voice_connected=False,
        status="active",
        outcome=None,
        end_reason=None,
        caller=data.caller,
        callee=data.callee,
        language=str(state.variables.get("language") or definition.language)[:10],
        state={},
        version=1,
        started_at=now,
        last_activity_at=now,
        ended_at=None,
        created_by=context.principal.id,
        created_at=now,
        updated_at=now,
    )
    return opened, state, engine, llm


async def open_session(
    session: AsyncSession, organization_id: str, session_id: str, *, lock: bool = False
) -> ConversationSession:
    """The session, which must still be active (404 unknown, 409 ended)."""
    row = await get_session(session, organization_id, session_id, lock=lock)
    if row.status != "active":
        raise SessionEnded(
            f"Session {session_id!r} has ended ({row.end_reason or row.outcome}); start a new one."
        )
    return row


_SESSIONS = cast(Table, ConversationSession.__table__)
_INSERT_SESSION = insert(_SESSIONS)
_SESSION_COLUMNS = [column for column in _SESSIONS.c if column.name != "state"]
_READ_SESSION = one_row(
    select(_SESSIONS).where(
        _SESSIONS.c.organization_id == bindparam("in_organization"),
        _SESSIONS.c.id == bindparam("in_session"),
    )
)
# A turn that does not end the conversation writes only what the turn changed, in one statement that is
# also the optimistic check (the version read before the engine ran, the session still active), and
# reads the row's other columns back as they are now (another request may have changed them meanwhile).
_TURN_CHECK = (
    _SESSIONS.c.organization_id == bindparam("in_organization"),
    _SESSIONS.c.id == bindparam("in_session"),
    _SESSIONS.c.version == bindparam("read_version"),
    _SESSIONS.c.status == "active",
)
_TURN_VALUES = {
    "state": bindparam("new_state"),
    "version": _SESSIONS.c.version + 1,
    "language": bindparam("new_language"),
    "last_activity_at": bindparam("now"),
    "updated_at": bindparam("now"),
}
_WRITE_TURN = update(_SESSIONS).where(*_TURN_CHECK).values(_TURN_VALUES).returning(*_SESSION_COLUMNS)
_END_VALUES = {
    **_TURN_VALUES,
    "status": "ended",
    "outcome": bindparam("new_outcome"),
    "end_reason": bindparam("new_end_reason"),
    "ended_at": bindparam("now"),
}
_END_TURN = update(_SESSIONS).where(*_TURN_CHECK).values(_END_VALUES).returning(*_SESSION_COLUMNS)
# An ending turn committed at once writes the call record planned from the row as it was read, so its
# UPDATE also checks what the record takes from the row and may change without a new version (a voice
# transport attaching, ``mark_voice_connected``); when it has, the usual way plans from the row as written.
_END_TURN_AS_READ = (
    update(_SESSIONS)
    .where(*_TURN_CHECK, _SESSIONS.c.voice_connected == bindparam("read_voice_connected"))
    .values(_END_VALUES)
    .returning(*_SESSION_COLUMNS)
)


async def _read_for_turn(session: AsyncSession, organization_id: str, session_id: str) -> SessionSnapshot:
    """The session as it is before the engine runs: a plain read beside ``session``'s transaction into
    a detached row (404, 409)."""
    rows = await read_rows_beside(
        session, _READ_SESSION, {"in_organization": organization_id, "in_session": session_id}
    )
    found = rows[0] if rows else None
    if found is None:
        raise NotFound(f"Session {session_id!r} was not found in this organization.")
    row = SessionSnapshot(**found._mapping)
    if row.status != "active":
        raise SessionEnded(
            f"Session {session_id!r} has ended ({row.end_reason or row.outcome}); start a new one."
        )
    return row


async def _write_turn(
    session: AsyncSession, loaded: SessionSnapshot, state: ConversationState, *, commit_at_once: bool = False
) -> SessionSnapshot | None:
    """Write a turn (a conversation that ended gets its call record in the same transaction); the row
    as written, or None when the session changed since it was read (another turn, or it ended).

    ``commit_at_once``: the request writes nothing after this, so the turn is committed with its audit
    event at once where the database allows it (``kit.db.commit_now``): a turn that goes on, and an
    ending turn whose call writes are plain statements (:func:`parley.calls.service.plain_call_writes`)."""
    data = state.to_json()
    ended = state.status == "ended"
    values = {
        "in_organization": loaded.organization_id,
        "in_session": loaded.id,
        "read_version": loaded.version,
        "new_state": data,
        "new_language": str(state.variables.get("language") or loaded.language or "")[:10] or None,
        "now": utcnow(),
    }
    if ended:
        values["new_outcome"] = state.outcome
        values["new_end_reason"] = (state.end_reason or "")[:60] or None
        if commit_at_once:
            committed = await _commit_ending(session, loaded, state, values)
            if committed is not None:
                return committed
        statement = _END_TURN
    else:
        statement = _WRITE_TURN
    rows = await commit_now(session, statement, values) if commit_at_once and not ended else None
    if rows is None:
        rows = list((await session.execute(statement, values)).all())
    written = rows[0] if rows else None
    if written is None:
        return None
    row = SessionSnapshot(**written._mapping, state=data)
    if ended:
        await store_call(session, call_record(row, state), jobs=session.info.get("jobs"))
    return row


async def _commit_ending(
    session: AsyncSession, loaded: SessionSnapshot, state: ConversationState, values: dict[str, Any]
) -> SessionSnapshot | None:
    """An ending turn, its call row and the audit event committed at once (``kit.db.commit_now``), the
    call planned from the row as read and ended by this turn, with its brain signals, their
    notification deliveries and events, and its ``call.ended`` event and deliveries. None when that
    cannot be (a throttled notification rule matches a signal; the database busy; the row changed):
    nothing was written and the caller goes the usual way."""
    now = values["now"]
    ending = replace(
        loaded,
        state=values["new_state"],
        version=loaded.version + 1,
        language=values["new_language"],
        status="ended",
        outcome=values["new_outcome"],
        end_reason=values["new_end_reason"],
        ended_at=now,
        last_activity_at=now,
        updated_at=now,
    )
    call = await plan_call(session, call_record(ending, state))
    writes = await plain_call_writes(session, call)
    if writes is None:
        return None
    rows = await commit_now(
        session,
        _END_TURN_AS_READ,
        {**values, "read_voice_connected": loaded.voice_connected},
        then=writes.steps,
    )
    if not rows:
        return None
    await queue_after_call(session, call, jobs=session.info.get("jobs"), written=writes)
    return SessionSnapshot(**rows[0]._mapping, state=values["new_state"])


async def send_message(
    session: AsyncSession,
    settings: Settings,
    context: OrgContext,
    session_id: str,
    text: str,
    *,
    on_text: TextSink | None = None,
    commit_at_once: bool = False,
) -> tuple[SessionFacts, TurnResult]:
    """One turn: load the session in a short read, run the engine with no transaction open (its tools
    and model may take long), then write the new state to ``session``. The caller holds the session's
    turn lock; the row's ``version`` guards against another process's turn meanwhile (409).

    What it returns is for reading: a snapshot of the row as written, or (a turn that stored the
    model's usage) the session's own row. ``commit_at_once``: the caller writes nothing after the turn,
    so a turn that goes on may be committed with the request's audit event as it is written
    (``kit.db.commit_now``; the sessions route)."""
    organization_id = context.organization_id
    engine: FlowEngine | None = None
    llm: PlatformLlm | None = None
    loaded = await _read_for_turn(session, organization_id, session_id)
    state = _state(loaded)
    async with short_read(session) as reader:
        redactor = await privacy.redactor_for(reader, organization_id)
        try:
            definition = await _definition_of(reader, loaded)
        except (NotFound, Conflict) as exc:
            # The flow was deleted or broken mid-conversation: end it cleanly instead of failing forever.
            state.status, state.outcome, state.end_reason = "ended", "failed", "flow_unavailable"
            log.warning("session_flow_unavailable", session_id=session_id, reason=exc.detail)
        else:
            line = _line(session, settings, organization_id, session_id, loaded.channel)
            engine, llm = await _engine(reader, session, settings, context, definition, line)
    result = TurnResult() if engine is None else await engine.handle(state, text, on_text=on_text)
    if llm is None or not llm.usage_rows:
        written = await _write_turn(session, loaded, _stored(state, redactor), commit_at_once=commit_at_once)
        if written is not None:
            return written, result
    # The model's usage is to be stored, or the session changed meanwhile (the read below answers
    # which 409): the whole row, locked, through the ORM.
    row = await open_session(session, organization_id, session_id, lock=True)
    if row.version != loaded.version:
        raise Conflict("The session was changed by another request at the same time; send it again.")
    await _save(session, row, state, llm)
    return row, result


async def transfer_ended(
    session: AsyncSession,
    settings: Settings,
    context: OrgContext,
    session_id: str,
    status: str,
    *,
    caller_gone: bool = False,
) -> tuple[ConversationSession, TurnResult]:
    """The provider reports how a dialling transfer ended (see ``FlowEngine.transfer_ended``): the
    session ends as ``transferred``, or the caller is back in the flow. A session that is not
    dialling (already reported, ended) is left as it is."""
    row = await get_session(session, context.organization_id, session_id, lock=True)
    state = _state(row)
    if row.status != "active" or not state.transferring:
        return row, TurnResult()
    definition = await _definition_of(session, row)
    line = _line(session, settings, context.organization_id, row.id, row.channel)
    engine, llm = await _engine(session, session, settings, context, definition, line)
    result = await engine.transfer_ended(state, status, caller_gone=caller_gone)
    if state.status == "ended":
        # The media stream stopped when the provider dialled and no transport will attach voice facts:
        # call.ended goes out with the record, now.
        row.voice_connected = False
    await _save(session, row, state, llm)
    return row, result


async def send_message_committed(
    database: Database,
    settings: Settings,
    context: OrgContext,
    session_id: str,
    text: str,
    *,
    on_text: TextSink | None = None,
    jobs: JobQueue | None = None,
) -> tuple[SessionFacts, TurnResult]:
    """``send_message`` in a transaction of its own, committed here (a streamed turn, which outlives
    its request); the caller holds the session's turn lock. Commit hooks run as for a request."""
    async with unit_of_work(database, jobs=jobs) as session:
        row, result = await send_message(session, settings, context, session_id, text, on_text=on_text)
    return row, result


async def end_session(
    session: AsyncSession,
    organization_id: str,
    session_id: str,
    *,
    outcome: str = "completed",
    reason: str,
    unless_handed_over_since: datetime | None = None,
) -> ConversationSession:
    """End the session now. ``unless_handed_over_since``: a voice leg's end, the leg having begun at
    that time. A session whose call was handed to a transfer since then is left as it is: its media
    stream stopped because the provider dials, and the dial's result decides (the session ends as
    transferred, or the caller comes back on a new leg, which this leg's late teardown must not end)."""
    row = await get_session(session, organization_id, session_id, lock=True)
    if row.status != "active":
        raise SessionEnded(f"Session {session_id!r} has already ended.")
    state = _state(row)
    if unless_handed_over_since is not None and (
        state.transferring
        or (state.transfer is not None and state.transfer.requested_at >= unless_handed_over_since)
    ):
        return row
    state.status, state.outcome, state.end_reason, state.waiting = "ended", outcome, reason, False  # type: ignore[assignment]
    await _save(session, row, state, None)
    return row


async def set_voiced(
    session: AsyncSession, organization_id: str, session_id: str, voiced: bool
) -> ConversationSession:
    row = await get_session(session, organization_id, session_id, lock=True)
    if row.status != "active":
        raise SessionEnded(f"Session {session_id!r} has ended; its voice setting can no longer change.")
    row.voiced = voiced
    row.last_activity_at = utcnow()
    try:
        await session.flush()
    except StaleDataError as exc:
        raise Conflict("The session was changed by another request at the same time; send it again.") from exc
    return row


async def mark_voice_connected(
    session: AsyncSession,
    organization_id: str,
    session_id: str,
    connected: bool = True,
    *,
    unless_handed_over_since: datetime | None = None,
) -> None:
    """A voice transport serves the session from now on (its voice facts follow the call record), or
    (``connected=False``) no longer: its stream stopped for a transfer, and whoever ends the session
    later sends ``call.ended`` at once.

    ``unless_handed_over_since``: the leg clearing the mark began at that time. When a dial requested
    since then is already over, the caller may be back on a new leg that set the mark for itself; this
    leg's late teardown leaves it (at worst ``call.ended`` waits out its grace period).

    A plain UPDATE that leaves the row's ``version`` alone: a turn in flight is not made to retry."""
    if not connected and unless_handed_over_since is not None:
        state = _state(await get_session(session, organization_id, session_id))
        transfer = state.transfer
        if (
            transfer is not None
            and not state.transferring
            and transfer.requested_at >= unless_handed_over_since
        ):
            return
    await session.execute(
        update(ConversationSession)
        .where(
            ConversationSession.organization_id == organization_id,
            ConversationSession.id == session_id,
            ConversationSession.voice_connected.is_(not connected),
        )
        .values(voice_connected=connected)
        .execution_options(synchronize_session=False)
    )


def live_query(organization_id: str) -> Select[ConversationSession]:
    return scoped(ConversationSession, organization_id).where(ConversationSession.status == "active")


# --- the idle sweeper ------------------------------------------------------------------------------


async def sweep_idle(
    database: Database,
    idle_seconds: float,
    *,
    now: datetime | None = None,
    jobs: JobQueue | None = None,
    on_ended: Callable[[str], Awaitable[None]] | None = None,
) -> int:
    """End every session idle for longer than ``idle_seconds`` (outcome abandoned); answer how many.

    ``on_ended(session_id)`` runs after each commit (the live-session registry stops a stream)."""
    cutoff = (now or utcnow()) - timedelta(seconds=idle_seconds)
    async with unit_of_work(database, write=False) as reader:
        rows = await reader.execute(
            select(ConversationSession.id, ConversationSession.organization_id)
            .where(ConversationSession.status == "active", ConversationSession.last_activity_at < cutoff)
            .limit(500)
        )
        candidates = [(r.id, r.organization_id) for r in rows]
    ended = 0
    for session_id, organization_id in candidates:
        async with locks.hold(session_id):
            try:
                async with unit_of_work(database, jobs=jobs) as session:
                    row = await get_session(session, organization_id, session_id, lock=True)
                    if row.status != "active" or row.last_activity_at >= cutoff:
                        continue
                    state = _state(row)
                    state.status, state.outcome, state.end_reason, state.waiting = (
                        "ended",
                        "abandoned",
                        "idle_timeout",
                        False,
                    )
                    await _save(session, row, state, None)
            except (NotFound, Conflict):
                continue
            ended += 1
            if on_ended is not None:
                await on_ended(session_id)
    return ended


# --- output --------------------------------------------------------------------------------------


_OUT_KEYS = frozenset({"current_node", "waiting", "variables", "transcript"})


def _out_fields(row: SessionFacts) -> dict[str, Any]:
    # The stored state is ConversationState.to_json(): its parts the answer shows are read from it
    # as they are, without validating the whole state (tool calls, the model's messages) again.
    data: dict[str, Any] = row.state or {}
    if not _OUT_KEYS.issubset(data):  # written before one of them existed: read as the engine would
        data = _state(row).to_json()
    return {
        "id": row.id,
        "flow_id": row.flow_id,
        "flow_version": row.flow_version,
        "channel": row.channel,
        "voiced": row.voiced,
        "status": row.status,
        "outcome": row.outcome,
        "end_reason": row.end_reason,
        "caller": row.caller,
        "callee": row.callee,
        "language": row.language,
        "current_node": data["current_node"],
        "waiting": data["waiting"],
        "variables": data["variables"],
        "transcript": [TurnOut.model_validate(turn) for turn in data["transcript"]],
        "started_at": row.started_at,
        "last_activity_at": row.last_activity_at,
        "ended_at": row.ended_at,
    }


def to_out(row: SessionFacts) -> SessionOut:
    return SessionOut(**_out_fields(row))


def to_turn_out(row: SessionFacts, result: TurnResult) -> SessionTurnOut:
    return SessionTurnOut(
        **_out_fields(row),
        events=[
            AgentEventOut(type=e.type, node_id=e.node_id, text=e.text, data=e.data) for e in result.events
        ],
        reply=result.text,
    )


def to_live(row: ConversationSession) -> LiveSessionOut:
    state = row.state or {}
    return LiveSessionOut(
        id=row.id,
        flow_id=row.flow_id,
        flow_version=row.flow_version,
        channel=row.channel,
        voiced=row.voiced,
        caller=row.caller,
        current_node=state.get("current_node"),
        turns=len(state.get("transcript") or []),
        started_at=row.started_at,
        last_activity_at=row.last_activity_at,
    )
