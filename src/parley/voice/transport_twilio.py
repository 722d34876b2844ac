"""``GET /api/telephony/twilio/media``: a Twilio Media Stream into a session's voice pipeline.

Twilio connects here when the call's TwiML says
``<Connect><Stream url="wss://<public>/api/telephony/twilio/media"><Parameter name="token" value="pst_…"/>
</Stream></Connect>`` (the telephony voice webhook answers that, with a stream token of purpose
``twilio-media`` for the session it created). The protocol is Twilio's: JSON text messages
``connected``, ``start`` (``streamSid``, ``callSid``, ``customParameters``, ``mediaFormat``),
``media`` (base64 G.711 μ-law at 8 kHz), ``mark``, ``dtmf`` and ``stop`` in; ``media``, ``mark`` (after
each agent utterance) and ``clear`` (barge-in) out. The pipeline runs at 16 kHz; audio is resampled
both ways. See docs/voice.md ("Twilio Media Streams").
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import structlog
from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from parley.auth.identity import IdentityResolver
from parley.kit.errors import ParleyError
from parley.voice.audio import Resampler, mulaw_to_pcm16, pcm16_to_mulaw
from parley.voice.pipeline.frames import AgentSpoken, EndFrame, ErrorFrame, Frame, WarningFrame
from parley.voice.session_call import (
    SAMPLE_RATE,
    Opened,
    Refused,
    VoiceCall,
    converse,
    open_voiced,
    refuse_if_draining,
)

log = structlog.get_logger("parley.voice.twilio")

TWILIO_RATE = 8000
MEDIA_FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
START_TIMEOUT_S = 10.0  # Twilio sends `connected` and `start` at once
END_MARK = "end"
END_MARK_WAIT_S = 5.0  # after the last words, wait this long at most for Twilio to have played them
MAX_BAD_MESSAGES = 20  # then the stream is closed (1007)
MAX_DIGITS = 64  # keys collected before '#'
MAX_PAYLOAD_BYTES = 64 * 1024  # base64 of one media message; Twilio sends 20 ms (160 bytes)

CLOSE_POLICY = 1008  # no or a bad token, media before start
CLOSE_UNSUPPORTED = 1003  # not μ-law 8 kHz mono
CLOSE_INVALID = 1007  # too many malformed messages


@dataclass(frozen=True)
class StreamStart:
    stream_sid: str
    call_sid: str | None
    parameters: dict[str, str]
    media_format: dict[str, Any]


def _parse(text: str | None) -> dict[str, Any] | None:
    try:
        message = json.loads(text or "")
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


async def _await_start(websocket: WebSocket) -> StreamStart | None:
    """Read ``connected`` and ``start``; None when Twilio went away first."""
    while True:
        try:
            received = await asyncio.wait_for(websocket.receive(), START_TIMEOUT_S)
        except TimeoutError as exc:
            raise Refused(CLOSE_POLICY, "No 'start' message arrived.") from exc
        except (WebSocketDisconnect, RuntimeError):
            return None
        if received["type"] == "websocket.disconnect":
            return None
        message = _parse(received.get("text"))
        if message is None:
            raise Refused(CLOSE_INVALID, "Media Stream messages are JSON text.")
        event = message.get("event")
        if event == "connected":
            continue
        if event != "start":
            raise Refused(CLOSE_POLICY, f"Expected 'start' before {str(event)[:20]!r}.")
        start = message.get("start")
        if not isinstance(start, dict):
            raise Refused(CLOSE_POLICY, "The 'start' message has no 'start' object.")
        sid = start.get("streamSid") or message.get("streamSid")
        parameters = start.get("customParameters")
        media_format = start.get("mediaFormat")
        if not isinstance(sid, str) or not sid:
            raise Refused(CLOSE_POLICY, "The 'start' message has no streamSid.")
        call_sid = start.get("callSid")
        return StreamStart(
            stream_sid=sid,
            call_sid=call_sid if isinstance(call_sid, str) else None,
            parameters={str(k): str(v) for k, v in parameters.items()}
            if isinstance(parameters, dict)
            else {},
            media_format=media_format if isinstance(media_format, dict) else {},
        )


async def _open(websocket: WebSocket, start: StreamStart) -> Opened:
    token = start.parameters.get("token", "").strip()
    if not token:
        raise Refused(CLOSE_POLICY, "The stream has no 'token' parameter.")
    try:
        context, session_id = await IdentityResolver.of(websocket.app.state).twilio_media(token)
    except ParleyError as exc:
        raise Refused(CLOSE_POLICY, exc.detail) from exc
    return await open_voiced(websocket.app.state, context, session_id)


def _format_problem(media_format: dict[str, Any]) -> str | None:
    offered = {key: media_format.get(key) for key in MEDIA_FORMAT}
    if offered == MEDIA_FORMAT:
        return None
    return (
        f"Unsupported media format {offered.get('encoding')} {offered.get('sampleRate')} Hz "
        f"{offered.get('channels')} ch; the stream must be audio/x-mulaw 8000 Hz mono."
    )


class _TwilioCall(VoiceCall):
    def __init__(self, websocket: WebSocket, opened: Opened, start: StreamStart) -> None:
        super().__init__(websocket.app, opened, record_rate=TWILIO_RATE)
        self.websocket = websocket
        self.stream_sid = start.stream_sid
        self.call_sid = start.call_sid
        self.up = Resampler(TWILIO_RATE, SAMPLE_RATE)
        self.down = Resampler(SAMPLE_RATE, TWILIO_RATE)
        self.unmarked = False  # agent audio sent since the last mark
        self.marks_sent = 0
        self.marks_played: list[str] = []
        self.end_played = asyncio.Event()
        self.receiving = True
        self.bad_messages = 0
        self.digits: list[str] = []
        self.format_problem = _format_problem(start.media_format)
        if self.format_problem is not None:
            self.end_as = ("failed", "unsupported_media_format")
            self.close_with = (CLOSE_UNSUPPORTED, self.format_problem)

    async def _send_json(self, data: dict[str, Any]) -> None:
        await self.websocket.send_text(json.dumps(data, separators=(",", ":")))

    async def start(self) -> None:
        log.info(
            "twilio_stream_started",
            session_id=self.session_id,
            stream_sid=self.stream_sid,
            call_sid=self.call_sid,
        )

    # --- out ---------------------------------------------------------------------------------

    async def _media(self, pcm8k: bytes) -> None:
        if not pcm8k:
            return
        self.played(pcm8k)
        payload = base64.b64encode(pcm16_to_mulaw(pcm8k)).decode("ascii")
        await self._send_json({"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}})
        self.unmarked = True

    async def send_audio(self, pcm: bytes) -> None:
        await self._media(self.down.feed(pcm))

    async def _mark(self, name: str) -> None:
        await self._send_json({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})
        self.unmarked = False
        self.marks_sent += 1

    async def clear(self) -> None:
        self.down = Resampler(SAMPLE_RATE, TWILIO_RATE)  # its tail belongs to the cleared audio
        self.unmarked = False
        await self._send_json({"event": "clear", "streamSid": self.stream_sid})

    async def send_event(self, frame: Frame) -> None:
        if isinstance(frame, AgentSpoken):
            await self._media(self.down.flush())
            self.down = Resampler(SAMPLE_RATE, TWILIO_RATE)
            if self.unmarked:
                await self._mark(f"turn-{frame.turn}-{self.marks_sent + 1}")
        elif isinstance(frame, EndFrame):
            # the flow ended: let Twilio play the last words (it echoes the mark then), then hang up
            await self._mark(END_MARK)
            if self.receiving:
                try:
                    await asyncio.wait_for(self.end_played.wait(), END_MARK_WAIT_S)
                except TimeoutError:
                    log.info("twilio_end_mark_not_played", session_id=self.session_id)
        elif isinstance(frame, ErrorFrame | WarningFrame):
            log.info("twilio_stream_notice", session_id=self.session_id, code=frame.code, detail=frame.detail)

    # --- in ----------------------------------------------------------------------------------

    def _bad(self, code: str, detail: str) -> bool:
        """Log a malformed message; True when there were too many and the stream must close."""
        self.bad_messages += 1
        log.warning("twilio_bad_message", session_id=self.session_id, code=code, detail=detail)
        if self.bad_messages >= MAX_BAD_MESSAGES:
            self.close_with = (CLOSE_INVALID, f"Too many malformed messages ({code}).")
            return True
        return False

    async def receive(self) -> None:
        try:
            await self._receive()
        finally:
            self.receiving = False
            self.end_played.set()

    async def _receive(self) -> None:
        if self.format_problem is not None:
            return
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            parsed = _parse(message.get("text")) if message.get("text") is not None else None
            if parsed is None:
                if self._bad("invalid_json", "Media Stream messages are JSON text."):
                    return
                continue
            event = parsed.get("event")
            if event == "media":
                if not self._on_media(parsed.get("media")):
                    return
            elif event == "mark":
                mark = parsed.get("mark")
                name = str(mark.get("name")) if isinstance(mark, dict) else ""
                self.marks_played.append(name)
                if name == END_MARK:
                    self.end_played.set()
            elif event == "stop":
                log.info("twilio_stream_stopped", session_id=self.session_id, stream_sid=self.stream_sid)
                return
            elif event == "dtmf":
                dtmf = parsed.get("dtmf")
                self._on_key(str(dtmf.get("digit", "")) if isinstance(dtmf, dict) else "")
            elif event in ("connected", "start"):
                if self._bad("repeated", f"A second {event!r} message."):
                    return
            elif self._bad("unknown_event", f"Unknown event {str(event)[:30]!r}."):
                return

    def _on_key(self, key: str) -> None:
        """Telephone keys: digits collect until ``#``, which sends them as the caller's answer."""
        if key == "#":
            typed, self.digits = "".join(self.digits), []
            log.info("twilio_dtmf_answer", session_id=self.session_id, digits=len(typed))
            self.pipeline.push_text(typed)
        elif len(key) == 1 and key in "0123456789*" and len(self.digits) < MAX_DIGITS:
            self.digits.append(key)
        else:
            log.warning("twilio_bad_message", session_id=self.session_id, code="invalid_dtmf", key=key[:5])

    def _on_media(self, media: Any) -> bool:
        """Decode one media message into the pipeline; False when the stream must close."""
        if not isinstance(media, dict) or not isinstance(media.get("payload"), str):
            return not self._bad("invalid_media", "A media message without a payload.")
        if media.get("track", "inbound") not in ("inbound", "inbound_track"):
            return True  # only the caller's side is listened to
        payload: str = media["payload"]
        if len(payload) > MAX_PAYLOAD_BYTES:
            return not self._bad("payload_too_large", f"A media payload of {len(payload)} characters.")
        try:
            mulaw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            return not self._bad("invalid_base64", "A media payload that is not base64.")
        pcm8k = mulaw_to_pcm16(mulaw)
        self.heard(pcm8k)
        self.listen(self.up.feed(pcm8k))
        return True


async def twilio_media_stream(websocket: WebSocket) -> None:
    """A Twilio Media Stream (μ-law 8 kHz, base64 JSON messages) talking to a session.

    Served at ``/api/telephony/twilio/media`` by :mod:`parley.telephony.router`."""
    await websocket.accept()
    try:
        refuse_if_draining(websocket.app)
        start = await _await_start(websocket)
        if start is None:
            return
        opened = await _open(websocket, start)
    except Refused as refused:
        await websocket.close(code=refused.code, reason=refused.reason[:120])
        return
    await converse(websocket, _TwilioCall(websocket, opened, start), transport="twilio")
