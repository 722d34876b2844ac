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

from parley.auth.dependencies import resolve_membership_role
from parley.auth.principal import OrgContext, Principal
from parley.auth.roles import Role
from parley.auth.service import API_KEY_PREFIX, principal_from_api_key, user_from_claims
from parley.auth.stream_tokens import is_stream_token, verify_stream_token
from parley.kit.errors import ParleyError
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


async def _principal(websocket: WebSocket, session: Any) -> Principal:
    header = websocket.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    token = token or websocket.query_params.get("token", "").strip()
    if not token:
        raise Refused(CLOSE_UNAUTHORIZED, "Authentication required: 'Authorization: Bearer' or ?token=.")
    state = websocket.app.state
    try:
        if token.startswith(API_KEY_PREFIX):
            return await principal_from_api_key(session, token)
        claims = await state.token_verifier.verify(token)
        return await user_from_claims(session, claims, state.settings.admin_subjects, state.known_users)
    except ParleyError as exc:
        raise Refused(CLOSE_UNAUTHORIZED, exc.detail) from exc


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
        raise Refused(CLOSE_UNAUTHORIZED, exc.detail) from exc
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
            raise Refused(CLOSE_NOT_FOUND, f"Organization {requested!r} was not found.")
        return OrgContext(organization_id, principal.api_key_role(), principal)
    if requested is None:
        raise Refused(CLOSE_NOT_FOUND, "Choose the organization with X-Organization-Id or ?org=.")
    role = await resolve_membership_role(session, principal, requested)
    if role is None:
        raise Refused(CLOSE_NOT_FOUND, f"Organization {requested!r} was not found.")
    return OrgContext(requested, role, principal)


async def _open(websocket: WebSocket, session_id: str) -> Opened:
    state = websocket.app.state
    async with state.db.sessionmaker() as session:
        granted = _stream_grant(websocket, session_id)
        if granted is not None:
            context, principal = granted, granted.principal
        else:
            principal = await _principal(websocket, session)
            context = await _context(websocket, session, principal)
    decision = await state.rate_limiter.check(f"{principal.kind}:{principal.id}")
    if not decision.allowed:
        raise Refused(CLOSE_RATE_LIMITED, f"Rate limit exceeded; retry in {decision.retry_after} s.")
    if not context.role.at_least(Role.member):
        raise Refused(CLOSE_FORBIDDEN, "Talking to a session needs the member role or higher.")
    return await open_voiced(state, context, session_id)


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
