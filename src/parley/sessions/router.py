from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Annotated, Any

import structlog
from fastapi import Depends, Path, Query, Request, WebSocket
from fastapi.responses import StreamingResponse
from starlette.responses import Response

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.auth.principal import OrgContext
from parley.auth.stream_tokens import issue_stream_token
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession, release_reader
from parley.kit.errors import ParleyError, documented
from parley.kit.jobs import runner_for
from parley.kit.routing import ParleyRouter
from parley.kit.sse import openapi_stream, sse, sse_response
from parley.runtime.engine import TurnResult
from parley.sessions import locks, service
from parley.sessions.dependencies import registry_for
from parley.sessions.models import SessionFacts
from parley.sessions.registry import control_after_commit
from parley.sessions.schemas import (
    AudioTokenOut,
    MessageIn,
    SessionCreate,
    SessionOut,
    SessionTurnOut,
    VoiceIn,
)

router = ParleyRouter(prefix="/api/sessions", tags=["Sessions"])
voice_router = ParleyRouter(prefix="/api/sessions", tags=["Monitoring"])

# The audio WebSocket is the voice pipeline's transport (parley.voice.transport_ws), which builds on
# sessions; the app hands it over at start-up (``app.state.session_audio``), so sessions never import it.
AudioSocket = Callable[[WebSocket, str], Awaitable[None]]

SessionId = Annotated[str, Path(alias="sessionId", max_length=40, description="Session id (ses_...).")]

log = structlog.get_logger("parley.sessions")

STREAM_DOC = (
    "With `Accept: text/event-stream` or `?stream=true` the answer is a stream of server-sent events: "
    "`delta` events with the model's text while an llm node generates it, then (once the turn has "
    "committed) one per agent event (`say` with the text, `tool_call`, `signal`, `transfer`, `end`), "
    "then `done` with the session's status, or `error` when the turn could not be saved."
)

TakeOver = Callable[[AsyncExitStack], Coroutine[Any, Any, None]]

# Streamed turns run in tasks of their own; a reference is kept until they finish.
_RUNNING: set[asyncio.Task[None]] = set()


class TurnHold:
    """The session's turn lock and a turn slot, held for a request; a streamed turn takes them over."""

    def __init__(self) -> None:
        self.takeover: TakeOver | None = None
        self.stack = AsyncExitStack()

    def hand_over(self, run: TakeOver) -> None:
        """Run ``run`` in a task once the request's transaction has committed; it owns the lock then."""
        self.takeover = run


async def _serialized(session_id: SessionId) -> AsyncIterator[TurnHold]:
    # Declared before the database session, so it is released only after the turn has committed.
    hold = TurnHold()
    stack = hold.stack
    try:
        await stack.enter_async_context(locks.hold(session_id))
        yield hold
    except BaseException:
        await stack.aclose()
        raise
    if hold.takeover is None:
        await stack.aclose()
        return
    # The request's transaction has committed (its session closed before this point): the streamed
    # turn continues in a task that releases the lock when it has committed in turn.
    task = asyncio.create_task(hold.takeover(stack))
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)


# Both take the handler's session (``DbSession``; a dependency is made once per request) before they
# wait: the reader they give back then hands authentication's work (the audit event, a noted key use)
# over to it, to commit with the turn. Without it, that work committed on its own transaction before
# the turn ran: one more write per waiting turn, and an audit event kept for a turn that then failed.
async def _slot(request: Request, _session: DbSession, context: OrgWriter) -> AsyncIterator[None]:
    if not locks.slot_free(request.app, context.organization_id):
        await release_reader(request)
    async with locks.turn_slot(request.app, context.organization_id):
        yield


async def _with_slot(
    request: Request,
    hold: Annotated[TurnHold, Depends(_serialized, scope="function")],
    _session: DbSession,
    context: OrgWriter,
) -> TurnHold:
    # The slot is the organization's, known once the caller is authenticated; the lock's stack owns it.
    # Waiting for it holds no pool connection (the running turns need them).
    if not locks.slot_free(request.app, context.organization_id):
        await release_reader(request)
    await hold.stack.enter_async_context(locks.turn_slot(request.app, context.organization_id))
    return hold


SessionTurnLock = Annotated[TurnHold, Depends(_with_slot, scope="function")]
TurnSlot = Annotated[None, Depends(_slot, scope="function")]


def _wants_stream(request: Request, stream: bool) -> bool:
    return stream or "text/event-stream" in request.headers.get("accept", "")


def _turn_events(row: SessionFacts, result: TurnResult) -> list[bytes]:
    out = service.to_turn_out(row, result)
    events = [sse(event.type, event.model_dump(mode="json")) for event in out.events]
    events.append(
        sse(
            "done",
            {
                "session_id": out.id,
                "status": out.status,
                "outcome": out.outcome,
                "waiting": out.waiting,
                "reply": out.reply,
            },
        )
    )
    return events


def _event_stream(queue: asyncio.Queue[bytes | None]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        while (item := await queue.get()) is not None:
            yield item

    return sse_response(body())


def _streamed_turn(
    request: Request, context: OrgContext, session_id: str, text: str, queue: asyncio.Queue[bytes | None]
) -> TakeOver:
    """The turn of a streamed message, run in a task of its own: it never depends on the client, so a
    client that goes away mid-stream does not lose the turn (it completes and commits)."""
    database = request.app.state.db
    settings = request.app.state.settings

    async def on_text(node_id: str, piece: str) -> None:
        queue.put_nowait(sse("delta", {"node_id": node_id, "text": piece}))

    jobs = runner_for(request.app.state)

    async def run(stack: AsyncExitStack) -> None:
        try:
            async with stack:
                row, result = await service.send_message_committed(
                    database, settings, context, session_id, text, on_text=on_text, jobs=jobs
                )
            for event in _turn_events(row, result):
                queue.put_nowait(event)
        except ParleyError as exc:
            queue.put_nowait(
                sse("error", {"status": exc.status_code, "code": exc.code, "detail": exc.detail})
            )
        except Exception as exc:  # a failed commit: nothing was written; the client may send it again
            log.error("session_stream_turn_failed", session_id=session_id, error_type=type(exc).__name__)
            queue.put_nowait(
                sse(
                    "error",
                    {
                        "status": 503,
                        "code": "turn_not_saved",
                        "detail": "The turn could not be saved; nothing was changed. Send the message again.",
                    },
                )
            )
        finally:
            queue.put_nowait(None)

    return run


@router.post("", summary="Create Session", response_model=SessionTurnOut, responses=documented(404, 409))
async def create_session(
    _slot: TurnSlot,
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[SessionCreate, ParsedBody(SessionCreate)],
) -> SessionTurnOut:
    """Start a conversation with a flow's latest published version (or `version`; the `test` channel
    may run the draft). Answers the session with the agent's opening turn(s).

    404 for an unknown flow or version, 409 when the flow has no published version yet.
    """

    def name_it(row: SessionFacts) -> None:  # before the write: the audit event may go with it
        describe(request, "session", row.id, flow_id=row.flow_id, channel=row.channel)

    row, result = await service.create_session(
        session, request.app.state.settings, context, data, before_write=name_it, commit_at_once=True
    )
    return service.to_turn_out(row, result)


@router.get("/{sessionId}", summary="Get Session", response_model=SessionOut)
async def get_session(session: DbSession, context: OrgReader, session_id: SessionId) -> SessionOut:
    """The session: status, where the flow stands, its variables and the transcript so far."""
    return service.to_out(await service.read_session(session, context.organization_id, session_id))


@router.post(
    "/{sessionId}/messages",
    summary="Send Session Message",
    response_model=SessionTurnOut,
    responses={
        200: openapi_stream(STREAM_DOC),
        **documented(409),
    },
)
async def send_session_message(
    hold: SessionTurnLock,
    request: Request,
    session: DbSession,
    context: OrgWriter,
    session_id: SessionId,
    data: Annotated[MessageIn, ParsedBody(MessageIn)],
    stream: Annotated[bool, Query(description="Answer as server-sent events.")] = False,
) -> Response | SessionTurnOut:
    """Send the caller's message (at most 4000 characters); answers the agent's reply turn(s).

    Messages to one session are handled one after another, in the order they arrive. 409 when the
    session has ended.
    """
    if _wants_stream(request, stream):
        # 404/409 are answered as statuses; the turn itself runs once this request has committed,
        # and the model's text is streamed while it is generated.
        row = await service.open_session(session, context.organization_id, session_id)
        describe(request, "session", row.id)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        hold.hand_over(_streamed_turn(request, context, row.id, data.text, queue))
        return _event_stream(queue)
    # Named before the turn: a turn that goes on is committed with its audit event as it is written.
    describe(request, "session", session_id)
    turn, result = await service.send_message(
        session, request.app.state.settings, context, session_id, data.text, commit_at_once=True
    )
    return service.to_turn_out(turn, result)


@router.post("/{sessionId}/end", summary="End Session", response_model=SessionOut, responses=documented(409))
async def end_session(
    _lock: SessionTurnLock, request: Request, session: DbSession, context: OrgWriter, session_id: SessionId
) -> SessionOut:
    """End a live session now; its call record is written. 409 when already ended.

    A session still active has not reached its flow's end, so the caller left: outcome abandoned."""
    row = await service.end_session(
        session, context.organization_id, session_id, outcome="abandoned", reason="ended_by_client"
    )
    describe(request, "session", row.id)
    # A live audio stream of the session, in whichever process holds it, stops and ends.
    control_after_commit(
        session,
        registry_for(request.app.state),
        row.id,
        {"action": "end", "outcome": row.outcome, "reason": row.end_reason},
    )
    return service.to_out(row)


@voice_router.post(
    "/{sessionId}/voice",
    summary="create_session_voice",
    response_model=SessionOut,
    responses=documented(409),
)
async def create_session_voice(
    _lock: SessionTurnLock,
    request: Request,
    session: DbSession,
    context: OrgWriter,
    session_id: SessionId,
    data: Annotated[VoiceIn, ParsedBody(VoiceIn)],
) -> SessionOut:
    """Switch spoken output on or off for a live session; answers the session's state.

    404 for an unknown session, 409 when it has already ended.
    """
    row = await service.set_voiced(session, context.organization_id, session_id, data.voiced)
    describe(request, "session", row.id, voiced=data.voiced)
    control_after_commit(
        session, registry_for(request.app.state), row.id, {"action": "voice", "voiced": data.voiced}
    )
    return service.to_out(row)


@voice_router.post(
    "/{sessionId}/audio-token",
    summary="create_session_audio_token",
    response_model=AudioTokenOut,
    responses=documented(409),
)
async def create_session_audio_token(
    request: Request, session: DbSession, context: OrgWriter, session_id: SessionId
) -> AudioTokenOut:
    """A token valid for five minutes that opens this session's audio WebSocket from a browser.

    Browsers cannot set headers on a WebSocket; pass it as ``?token=``. 404 for an unknown session,
    409 when it has already ended.
    """
    row = await service.open_session(session, context.organization_id, session_id)
    token, expires_at = issue_stream_token(
        request.app.state.settings,
        organization_id=context.organization_id,
        session_id=row.id,
        issued_by=context.principal.id,
    )
    return AudioTokenOut(token=token, expires_at=expires_at, audio_path=f"/api/sessions/{row.id}/audio")


@router.websocket("/{sessionId}/audio", name="session_audio_socket")
async def session_audio_socket(websocket: WebSocket, sessionId: str) -> None:
    """Talk to a session: PCM16 mono 16 kHz audio in and out, JSON events (docs/voice.md)."""
    serve: AudioSocket = websocket.app.state.session_audio
    await serve(websocket, sessionId)
