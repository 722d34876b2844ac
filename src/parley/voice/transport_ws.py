"""``GET /api/sessions/{sessionId}/audio``: a session's voice pipeline over a WebSocket.

Binary frames carry PCM16 mono 16 kHz audio both ways (any length in; 20 ms frames out); text frames
carry JSON control messages from the client (``{"type": "end"}``) and events from the server
(``ready``, ``speech``, ``transcript``, ``agent_text``, ``tool_call``, ``metrics``, ``interruption``,
``warning``, ``end``, ``error``). See docs/voice.md ("WebSocket audio") for the protocol.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from fastapi import WebSocket

from parley.auth.identity import IdentityResolver, Presented, require_role
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.auth.stream_tokens import is_stream_token
from parley.kit.db import unit_of_work
from parley.kit.errors import Forbidden, NotFound, ParleyError, TooManyRequests, Unauthorized
from parley.voice.pipeline.frames import (
    AgentText,
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
from parley.voice.session_call import (
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_RATE_LIMITED,
    CLOSE_UNAUTHORIZED,
    DIGITS,
    FRAME_MS,
    PLAYOUT_LEAD_S,
    SAMPLE_RATE,
    Engines,
    EnginesFactory,
    Opened,
    Refused,
    SessionTurns,
    VoiceCall,
    converse,
    open_voiced,
    phrases_for,
    refuse_if_draining,
)

# The names other modules (benchmarks, embedders) have imported from here.
__all__ = [
    "DIGITS",
    "FRAME_MS",
    "PLAYOUT_LEAD_S",
    "SAMPLE_RATE",
    "Engines",
    "EnginesFactory",
    "SessionTurns",
    "phrases_for",
    "session_audio_socket",
]

log = structlog.get_logger("parley.voice.ws")


# The identity resolver's typed errors, as WebSocket close codes.
_CLOSE_CODES: dict[type[ParleyError], int] = {
    Unauthorized: CLOSE_UNAUTHORIZED,
    Forbidden: CLOSE_FORBIDDEN,
    NotFound: CLOSE_NOT_FOUND,
    TooManyRequests: CLOSE_RATE_LIMITED,
}


async def _context(websocket: WebSocket, session_id: str) -> OrgContext:
    """Who may talk to this session: a ``pst_`` stream token in ``?token=`` (browsers), or an
    ``Authorization`` header with ``X-Organization-Id``/``?org=`` (servers)."""
    identity = IdentityResolver.of(websocket.app.state)
    query_token = websocket.query_params.get("token", "").strip()
    address = websocket.client.host if websocket.client else None
    if is_stream_token(query_token):
        return await identity.stream(query_token, session_id=session_id, purpose="audio", address=address)
    if not query_token and not websocket.headers.get("authorization"):
        raise Unauthorized(
            "Authentication required: ?token=pst_... from POST /api/sessions/{id}/audio-token, "
            "or 'Authorization: Bearer'."
        )
    presented = Presented(
        authorization=websocket.headers.get("authorization"),
        organization=websocket.headers.get("x-organization-id") or websocket.query_params.get("org"),
        query_token=query_token or None,
        address=address,
    )
    async with unit_of_work(websocket.app.state.db, write=False) as session:
        principal = await identity.principal(session, presented)
        context = await identity.context(
            session,
            principal,
            presented.organization,
            pick_only_membership=False,
            how_to_choose="X-Organization-Id or ?org=",
        )
    require_role(context, Role.member, what="Talking to a session")
    return context


async def _open(websocket: WebSocket, session_id: str) -> Opened:
    try:
        context = await _context(websocket, session_id)
    except ParleyError as exc:
        raise Refused(_CLOSE_CODES.get(type(exc), CLOSE_UNAUTHORIZED), exc.detail) from exc
    return await open_voiced(websocket.app.state, context, session_id)


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


class _SocketCall(VoiceCall):
    """PCM16 16 kHz binary frames both ways, JSON events out, JSON control messages in."""

    def __init__(self, websocket: WebSocket, opened: Opened) -> None:
        super().__init__(websocket.app, opened, record_rate=SAMPLE_RATE)
        self.websocket = websocket
        self._odd = b""  # half a sample, recorded with the next frame

    async def send_json(self, data: dict[str, Any]) -> None:
        await self.websocket.send_text(json.dumps(data, ensure_ascii=False, default=str))

    async def start(self) -> None:
        await self.send_json(
            {"type": "ready", "session_id": self.session_id, "sample_rate": SAMPLE_RATE, "frame_ms": FRAME_MS}
        )

    async def send_audio(self, pcm: bytes) -> None:
        self.played(pcm)
        await self.websocket.send_bytes(pcm)

    async def send_event(self, frame: Frame) -> None:
        event = _event(frame)
        if event is not None:
            await self.send_json(event)

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
                self.listen(data)
                samples = self._odd + data
                whole = len(samples) // 2 * 2
                self.heard(samples[:whole])
                self._odd = samples[whole:]
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


async def session_audio_socket(websocket: WebSocket, sessionId: str) -> None:
    """Talk to a session: PCM16 mono 16 kHz audio in and out, JSON events (docs/voice.md).

    Served at ``/api/sessions/{sessionId}/audio`` by :mod:`parley.sessions.router`."""
    await websocket.accept()
    try:
        refuse_if_draining(websocket.app)
        opened = await _open(websocket, sessionId[:40])
    except Refused as refused:
        await websocket.close(code=refused.code, reason=refused.reason[:120])
        return
    await converse(websocket, _SocketCall(websocket, opened))
