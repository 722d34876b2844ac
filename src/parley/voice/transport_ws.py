"""``GET /api/sessions/{sessionId}/audio``: a session's voice pipeline over a WebSocket.

Binary frames carry PCM16 mono 16 kHz audio both ways (any length in; 20 ms frames out); text frames
carry JSON control messages from the client (``{"type": "end"}``) and events from the server
(``ready``, ``speech``, ``transcript``, ``agent_text``, ``tool_call``, ``metrics``, ``interruption``,
``warning``, ``end``, ``error``). See docs/voice.md ("WebSocket audio") for the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from parley.auth.dependencies import resolve_membership_role
from parley.auth.principal import OrgContext, Principal
from parley.auth.service import API_KEY_PREFIX, principal_from_api_key, user_from_claims
from parley.auth.stream_tokens import is_stream_token, verify_stream_token
from parley.flows.definition import CollectNode, FlowDefinition
from parley.kit.errors import NotFound, ParleyError
from parley.kit.jobs import runner_for
from parley.organizations.models import Role
from parley.runtime.state import ConversationState
from parley.sessions import locks, service
from parley.sessions.service import SessionEnded
from parley.system.lifecycle import lifecycle_of
from parley.voice import registry
from parley.voice.engines.base import SttEngine, TtsEngine, Vad
from parley.voice.engines.vad import WebRtcVad
from parley.voice.pipeline.frames import (
    AgentText,
    AudioOut,
    EndFrame,
    ErrorFrame,
    Frame,
    Interrupt,
    MetricsFrame,
    SpeechEnded,
    SpeechStarted,
    ToolCallFrame,
    TranscriptFrame,
    WarningFrame,
)
from parley.voice.pipeline.pipeline import PipelineConfig, TurnReply, VoicePipeline

log = structlog.get_logger("parley.voice.ws")

router = APIRouter(prefix="/api/sessions", tags=["Sessions"])

SAMPLE_RATE = 16000
FRAME_MS = 20
FRAME_BYTES = SAMPLE_RATE * FRAME_MS // 1000 * 2
MAX_INPUT_FRAMES = 250  # 5 s of caller audio waiting for the pipeline; older frames go first
PLAYOUT_LEAD_S = 0.2  # agent audio is sent at most this far ahead of real time
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_ENDED = 4409
CLOSE_RATE_LIMITED = 4429
CLOSE_UNAVAILABLE = 4503
CLOSE_SERVICE_RESTART = 1012


@dataclass(frozen=True)
class Engines:
    stt: SttEngine
    tts: TtsEngine
    vad: Vad
    voice: str | None = None


# Tests (and embedders) may set ``app.state.voice_engines`` to a callable answering :class:`Engines`.
EnginesFactory = Callable[[], Engines]


class _Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def phrases_for(definition: FlowDefinition, node_id: str | None, language: str | None) -> list[str] | None:
    """The words a collect node expects (digits, yes/no, its choices); None for free answers."""
    node = next((n for n in definition.nodes if n.id == node_id), None)
    if not isinstance(node, CollectNode) or not (language or "en").startswith("en"):
        return None
    if node.kind in ("digits", "number"):
        return list(DIGITS)
    if node.kind == "yes_no":
        return ["yes", "no", "yeah", "nope"]
    if node.kind == "choice" and node.choices:
        return [word for choice in node.choices for word in choice.lower().split()]
    return None


class SessionTurns:
    """The pipeline's turn port: one committed session turn, under the session's turn lock."""

    def __init__(self, app: Any, context: OrgContext, session_id: str) -> None:
        self.app, self.context, self.session_id = app, context, session_id

    async def turn(self, text: str) -> TurnReply:
        state = self.app.state
        async with locks.hold(self.session_id), locks.turn_slot(self.app):
            row, result = await service.send_message_committed(
                state.db, state.settings, self.context, self.session_id, text, jobs=runner_for(state)
            )
        phrases = None
        if row.status == "active":
            async with state.db.sessionmaker() as session:
                definition = await service.definition_of(session, row)
            current = ConversationState.from_json(row.state).current_node
            phrases = phrases_for(definition, current, row.language)
        return TurnReply(
            result,
            ended=row.status == "ended",
            outcome=row.outcome,
            reason=row.end_reason,
            phrases=phrases,
        )


async def _principal(websocket: WebSocket, session: Any) -> Principal:
    header = websocket.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    token = token or websocket.query_params.get("token", "").strip()
    if not token:
        raise _Refused(CLOSE_UNAUTHORIZED, "Authentication required: 'Authorization: Bearer' or ?token=.")
    state = websocket.app.state
    try:
        if token.startswith(API_KEY_PREFIX):
            return await principal_from_api_key(session, token)
        claims = await state.token_verifier.verify(token)
        return await user_from_claims(session, claims, state.settings.admin_subjects, state.known_users)
    except ParleyError as exc:
        raise _Refused(CLOSE_UNAUTHORIZED, exc.detail) from exc


def _stream_grant(websocket: WebSocket, session_id: str) -> OrgContext | None:
    """The context a short-lived ``pst_`` token in ``?token=`` grants (member on this one session)."""
    token = websocket.query_params.get("token", "").strip()
    if not is_stream_token(token):
        return None
    try:
        grant = verify_stream_token(
            websocket.app.state.settings, token, session_id=session_id, purpose="audio"
        )
    except ParleyError as exc:
        raise _Refused(CLOSE_UNAUTHORIZED, exc.detail) from exc
    return OrgContext(grant.organization_id, Role.member, Principal(kind="stream", id=grant.issued_by))


async def _context(websocket: WebSocket, session: Any, principal: Principal) -> OrgContext:
    requested = (
        websocket.headers.get("x-organization-id", "").strip()
        or websocket.query_params.get("org", "").strip()
        or None
    )
    if principal.kind == "api_key":
        organization_id = principal.api_key_organization_id
        assert organization_id is not None
        if requested is not None and requested != organization_id:
            raise _Refused(CLOSE_NOT_FOUND, f"Organization {requested!r} was not found.")
        return OrgContext(organization_id, principal.api_key_role(), principal)
    if requested is None:
        raise _Refused(CLOSE_NOT_FOUND, "Choose the organization with X-Organization-Id or ?org=.")
    role = await resolve_membership_role(session, principal, requested)
    if role is None:
        raise _Refused(CLOSE_NOT_FOUND, f"Organization {requested!r} was not found.")
    return OrgContext(requested, role, principal)


@dataclass
class _Opened:
    context: OrgContext
    config: PipelineConfig
    engines: Engines


async def _open(websocket: WebSocket, session_id: str) -> _Opened:
    state = websocket.app.state
    async with state.db.sessionmaker() as session:
        granted = _stream_grant(websocket, session_id)
        if granted is not None:
            context, principal = granted, granted.principal
        else:
            principal = await _principal(websocket, session)
            context = await _context(websocket, session, principal)
        limiter = state.rate_limiter
        decision = limiter.hit(f"{principal.kind}:{principal.id}")
        if not decision.allowed:
            raise _Refused(CLOSE_RATE_LIMITED, f"Rate limit exceeded; retry in {decision.retry_after} s.")
        if not context.role.at_least(Role.member):
            raise _Refused(CLOSE_FORBIDDEN, "Talking to a session needs the member role or higher.")
        try:
            row = await service.open_session(session, context.organization_id, session_id)
            definition = await service.definition_of(session, row)
        except SessionEnded as exc:
            raise _Refused(CLOSE_ENDED, exc.detail) from exc
        except NotFound as exc:
            raise _Refused(CLOSE_NOT_FOUND, exc.detail) from exc
        except ParleyError as exc:
            raise _Refused(CLOSE_ENDED, exc.detail) from exc
        language = (row.language or definition.language)[:2]
        phrases = phrases_for(definition, ConversationState.from_json(row.state).current_node, language)
        factory: EnginesFactory | None = getattr(state, "voice_engines", None)
        try:
            if factory is not None:
                engines = factory()
            else:
                chosen = await registry.engines_for_flow(session, state.settings, context, definition.voice)
                engines = Engines(chosen.stt, chosen.tts, WebRtcVad(SAMPLE_RATE), chosen.tts_voice)
        except ParleyError as exc:
            raise _Refused(CLOSE_UNAVAILABLE, exc.detail) from exc
    config = PipelineConfig(
        sample_rate=SAMPLE_RATE,
        frame_ms=FRAME_MS,
        language=language,
        phrases=phrases,
        voice=engines.voice,
    )
    return _Opened(context, config, engines)


def _event(frame: Frame) -> dict[str, Any] | None:
    match frame:
        case SpeechStarted(at_ms=at):
            return {"type": "speech", "speaking": True, "at_ms": at}
        case SpeechEnded(at_ms=at):
            return {"type": "speech", "speaking": False, "at_ms": at}
        case TranscriptFrame(text=text, final=final):
            return {"type": "transcript", "final": final, "text": text}
        case AgentText(text=text, turn=turn, node_id=node):
            return {"type": "agent_text", "text": text, "turn": turn, "node_id": node}
        case ToolCallFrame(data=data, node_id=node):
            return {"type": "tool_call", "node_id": node, "data": data}
        case MetricsFrame(turn=turn, metrics=metrics):
            return {"type": "metrics", "turn": turn, **metrics}
        case Interrupt(turn=turn):
            return {"type": "interruption", "turn": turn}
        case EndFrame(outcome=outcome, reason=reason):
            return {"type": "end", "outcome": outcome, "reason": reason}
        case ErrorFrame(code=code, detail=detail):
            return {"type": "error", "code": code, "detail": detail}
        case WarningFrame(code=code, detail=detail):
            return {"type": "warning", "code": code, "detail": detail}
    return None


class _Inbox:
    """Caller audio waiting for the pipeline: whole frames, bounded (the oldest go first)."""

    def __init__(self, limit: int) -> None:
        self.frames: deque[bytes] = deque()
        self.limit = limit
        self.carry = b""
        self.ready = asyncio.Event()
        self.closed = False

    def add(self, data: bytes) -> int:
        """Cut ``data`` (after the carried remainder) into frames; answer how many old ones were dropped."""
        buffer = self.carry + data
        whole = len(buffer) - len(buffer) % FRAME_BYTES
        self.carry = buffer[whole:]
        dropped = 0
        for start in range(0, whole, FRAME_BYTES):
            if len(self.frames) >= self.limit:
                self.frames.popleft()
                dropped += 1
            self.frames.append(buffer[start : start + FRAME_BYTES])
        if whole:
            self.ready.set()
        return dropped

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    async def get(self) -> bytes | None:
        while not self.frames:
            if self.closed:
                return None
            self.ready.clear()
            await self.ready.wait()
        return self.frames.popleft()


class _Call:
    def __init__(self, websocket: WebSocket, session_id: str, opened: _Opened) -> None:
        self.websocket = websocket
        self.session_id = session_id
        self.context = opened.context
        self.pipeline = VoicePipeline(
            stt=opened.engines.stt,
            tts=opened.engines.tts,
            vad=opened.engines.vad,
            turns=SessionTurns(websocket.app, opened.context, session_id),
            config=opened.config,
        )
        self.inbox = _Inbox(MAX_INPUT_FRAMES)
        self.caller_ended = False
        self.stop_reason: str | None = None
        self._stopped = asyncio.Event()

    def stop(self, reason: str) -> None:
        """End the call from the server side (shutdown): the turn in progress is still answered."""
        self.stop_reason = reason
        self._stopped.set()

    async def send_json(self, data: dict[str, Any]) -> None:
        await self.websocket.send_text(json.dumps(data, ensure_ascii=False, default=str))

    def warn(self, code: str, detail: str) -> None:
        self.pipeline.out.put(WarningFrame(code, detail))

    def error(self, code: str, detail: str) -> None:
        self.pipeline.out.put(ErrorFrame(code, detail))

    async def receive(self) -> None:
        """The client's frames, until it disconnects or asks to end."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data: bytes | None = message.get("bytes")
            if data is not None:
                if len(data) % 2:
                    self.error(
                        "odd_frame",
                        f"Audio frames are 16-bit samples; {len(data)} bytes is not a whole number of "
                        "them. The odd byte is kept for the next frame.",
                    )
                dropped = self.inbox.add(data)
                if dropped:
                    self.warn(
                        "audio_dropped",
                        f"Audio arrives faster than it is processed; the oldest {dropped * FRAME_MS} ms "
                        "were dropped.",
                    )
                continue
            text = message.get("text") or ""
            try:
                control = json.loads(text)
            except ValueError:
                self.error("invalid_json", 'Text frames must be JSON control messages, like {"type": "end"}.')
                continue
            kind = control.get("type") if isinstance(control, dict) else None
            if kind == "end":
                self.caller_ended = True
                return
            self.error("unknown_message", 'Unknown control message; the client may send {"type": "end"}.')

    async def feed(self) -> None:
        while (frame := await self.inbox.get()) is not None:
            await self.pipeline.push_audio(frame)
            if self.pipeline.ended:
                return

    async def send(self) -> None:
        """Frames out: audio paced to at most ``PLAYOUT_LEAD_S`` ahead of real time, events as JSON."""
        playout = time.monotonic()
        while True:
            frame = await self.pipeline.out.get()
            if isinstance(frame, AudioOut):
                now = time.monotonic()
                playout = max(playout, now)
                if playout - now > PLAYOUT_LEAD_S:
                    await asyncio.sleep(playout - now - PLAYOUT_LEAD_S)
                await self.websocket.send_bytes(frame.pcm)
                playout += FRAME_MS / 1000
                continue
            if isinstance(frame, Interrupt):
                playout = time.monotonic()
            event = _event(frame)
            if event is not None:
                await self.send_json(event)
            if isinstance(frame, EndFrame):
                return

    async def run(self) -> None:
        await self.send_json(
            {"type": "ready", "session_id": self.session_id, "sample_rate": SAMPLE_RATE, "frame_ms": FRAME_MS}
        )
        receiver = asyncio.create_task(self.receive())
        feeder = asyncio.create_task(self.feed())
        sender = asyncio.create_task(self.send())
        stopper = asyncio.create_task(self._stopped.wait())
        try:
            await asyncio.wait({receiver, sender, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # The caller is gone (or the flow ended): answer what was said, then end the session.
            self.inbox.close()
            await asyncio.gather(feeder, return_exceptions=True)
            await self.pipeline.finish_input()
            await self.pipeline.drain()
            await self.pipeline.aclose()
            for task in (receiver, sender, stopper):
                task.cancel()
            await asyncio.gather(receiver, sender, stopper, return_exceptions=True)
            shut_down = self.stop_reason is not None and not self.pipeline.ended
            if not self.pipeline.ended:
                await self._end_session()
            if shut_down:
                with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                    await self.send_json({"type": "end", "outcome": "failed", "reason": self.stop_reason})
                    await self.websocket.close(code=CLOSE_SERVICE_RESTART, reason="The server is restarting.")

    async def _end_session(self) -> None:
        outcome, reason = (
            ("completed", "caller_ended") if self.caller_ended else ("abandoned", "caller_hung_up")
        )
        if self.stop_reason is not None:
            outcome, reason = "failed", self.stop_reason
        state = self.websocket.app.state
        try:
            async with locks.hold(self.session_id), state.db.write_sessionmaker() as session:
                session.info["jobs"] = runner_for(state)
                await service.end_session(
                    session, self.context.organization_id, self.session_id, outcome=outcome, reason=reason
                )
                await session.commit()
                callbacks = session.info.pop("after_commit", [])
            for callback in callbacks:
                await callback()
        except SessionEnded:
            return
        except Exception as exc:  # the idle sweeper ends it later
            log.warning("voice_session_end_failed", session_id=self.session_id, error_type=type(exc).__name__)


@router.websocket("/{sessionId}/audio", name="session_audio_socket")
async def session_audio_socket(websocket: WebSocket, sessionId: str) -> None:
    """Talk to a session: PCM16 mono 16 kHz audio in and out, JSON events (docs/voice.md)."""
    await websocket.accept()
    lifecycle = lifecycle_of(websocket.app)
    try:
        if lifecycle.draining:
            raise _Refused(
                CLOSE_UNAVAILABLE, "The server is shutting down; connect again to reach another one."
            )
        opened = await _open(websocket, sessionId[:40])
    except _Refused as refused:
        await websocket.close(code=refused.code, reason=refused.reason[:120])
        return
    call = _Call(websocket, sessionId, opened)
    with lifecycle.track(call), contextlib.suppress(WebSocketDisconnect):
        await call.run()
    if websocket.client_state == WebSocketState.CONNECTED:
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(code=1000)
