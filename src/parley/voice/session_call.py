"""What every voice transport shares: one voiced session's pipeline, its life cycle and its call record.

A transport (``transport_ws`` for PCM16 over a WebSocket, ``transport_twilio`` for Twilio Media
Streams) authenticates, then subclasses :class:`VoiceCall` with how audio and events go over its wire.
:class:`VoiceCall` feeds the caller's audio through a bounded :class:`Inbox` into the
:class:`VoicePipeline`, paces the agent's audio out, records both sides (:class:`StereoRecorder`),
ends the session when the caller goes, and finally adds the per-turn voice metrics and the recording
to the call record (``parley.calls.service.attach_voice``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from parley.auth.principal import OrgContext
from parley.calls.service import attach_voice, call_of_session, recording_blob_key
from parley.flows.definition import CollectNode, FlowDefinition, TurnTaking
from parley.kit.db import unit_of_work, utcnow
from parley.kit.errors import NotFound, ParleyError
from parley.kit.jobs import runner_for
from parley.kit.lifecycle import lifecycle_of
from parley.privacy import service as privacy
from parley.runtime.engine import TextSink
from parley.runtime.state import ConversationState
from parley.sessions import locks, service
from parley.sessions.dependencies import registry_for
from parley.sessions.registry import ControlMessage
from parley.sessions.service import SessionEnded
from parley.voice import registry
from parley.voice.engines import lexicon
from parley.voice.engines.base import SttEngine, TtsEngine, Vad
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.vad import WebRtcVad
from parley.voice.lines import SpokenLines
from parley.voice.pipeline.frames import AudioOut, EndFrame, ErrorFrame, Frame, Interrupt, WarningFrame
from parley.voice.pipeline.pipeline import Expect, PipelineConfig, TurnReply, VoicePipeline
from parley.voice.recording import StereoRecorder

log = structlog.get_logger("parley.voice.call")

SAMPLE_RATE = 16000  # the pipeline's rate, whatever the transport's
FRAME_MS = 20
FRAME_BYTES = SAMPLE_RATE * FRAME_MS // 1000 * 2
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
MAX_INPUT_FRAMES = 250  # 5 s of caller audio waiting for the pipeline; older frames go first
PLAYOUT_LEAD_S = 0.2  # agent audio is sent at most this far ahead of real time

CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_ENDED = 4409
CLOSE_RATE_LIMITED = 4429
CLOSE_UNAVAILABLE = 4503
CLOSE_SERVICE_RESTART = 1012

# Sessions with a voice connection in this process: a second connection to one is refused.
_CONNECTED: set[str] = set()


@dataclass(frozen=True)
class Engines:
    stt: SttEngine
    tts: TtsEngine
    vad: Vad
    voice: str | None = None
    # the voice that speaks when ``tts`` fails (a vendor's outage): the offline eSpeak NG by default
    fallback_tts: TtsEngine | None = None


# Tests (and embedders) may set ``app.state.voice_engines`` to a callable answering :class:`Engines`.
EnginesFactory = Callable[[], Engines]


class Refused(Exception):
    """The connection is refused: close with ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def phrases_for(definition: FlowDefinition, node_id: str | None, language: str | None) -> list[str] | None:
    """The words a collect node expects (number words, yes/no, its choices) in the call's language."""
    node = next((n for n in definition.nodes if n.id == node_id), None)
    if not isinstance(node, CollectNode) or not lexicon.has_lexicon(language):
        return None
    english = lexicon.base_language(language) == "en"
    if node.kind in ("digits", "number"):
        return list(DIGITS) if english else lexicon.number_words(language)
    if node.kind == "yes_no":
        return ["yes", "no", "yeah", "nope"] if english else lexicon.yes_no_words(language)
    if node.kind == "choice" and node.choices:
        return [word for choice in node.choices for word in choice.lower().split()]
    return None


def expect_of(definition: FlowDefinition, node_id: str | None, language: str | None) -> Expect | None:
    """What the current collect node waits for (endpointing: when is its answer complete)."""
    node = next((n for n in definition.nodes if n.id == node_id), None)
    if not isinstance(node, CollectNode):
        return None
    return Expect(
        kind=node.kind,
        phrases=phrases_for(definition, node_id, language),
        min_digits=node.min_length,
        max_digits=node.max_length,
        choices=node.choices,
        hangover_ms=node.hangover_ms,
        short_hangover_ms=node.short_hangover_ms,
    )


def pipeline_config(
    definition: FlowDefinition, conversation: ConversationState, language: str, voice: str | None
) -> PipelineConfig:
    """The flow's turn-taking settings, spoken lines and current question for a live call."""
    taking: TurnTaking = definition.voice.turn_taking
    fallback = conversation.variables.get("fallback") or definition.variables.get("fallback")
    node = conversation.current_node
    return PipelineConfig(
        sample_rate=SAMPLE_RATE,
        frame_ms=FRAME_MS,
        language=language,
        phrases=phrases_for(definition, node, language),
        expect=expect_of(definition, node, language),
        voice=voice,
        stop_ms=taking.hangover_ms,
        short_stop_ms=taking.short_hangover_ms,
        barge_in_min_ms=taking.barge_in_min_ms,
        barge_in_min_words=taking.barge_in_min_words,
        filler_after_ms=taking.filler_after_ms,
        reprompt_after_ms=taking.reprompt_after_ms,
        max_reprompts=taking.max_reprompts,
        # a templated fallback line is left to the runtime; a plain one is spoken as it is
        lines=SpokenLines.for_language(
            language, fallback if isinstance(fallback, str) and "{" not in fallback else None
        ),
    )


class SessionTurns:
    """The pipeline's turn port: one committed session turn, under the session's turn lock."""

    def __init__(self, app: Any, context: OrgContext, session_id: str) -> None:
        self.app, self.context, self.session_id = app, context, session_id

    async def turn(self, text: str) -> TurnReply:
        return await self.stream_turn(text, None)

    async def stream_turn(self, text: str, on_text: TextSink | None) -> TurnReply:
        """The turn; an ``llm`` node's answer goes to ``on_text`` piece by piece as it is generated."""
        state = self.app.state
        async with locks.hold(self.session_id), locks.turn_slot(self.app, self.context.organization_id):
            row, result = await service.send_message_committed(
                state.db,
                state.settings,
                self.context,
                self.session_id,
                text,
                on_text=on_text,
                jobs=runner_for(state),
            )
        conversation = ConversationState.from_json(row.state)
        phrases, expect = None, None
        if row.status == "active":
            async with unit_of_work(state.db, write=False) as session:
                definition = await service.definition_of(session, row)
            phrases = phrases_for(definition, conversation.current_node, row.language)
            expect = expect_of(definition, conversation.current_node, row.language)
        # the engine adds a metrics entry for every turn that said or did something
        metrics_index = (
            conversation.metrics[-1].turn_index if result.events and conversation.metrics else None
        )
        return TurnReply(
            result,
            ended=row.status == "ended",
            outcome=row.outcome,
            reason=row.end_reason,
            phrases=phrases,
            metrics_index=metrics_index,
            expect=expect,
        )


@dataclass
class Opened:
    """An active session, ready for a voice connection."""

    context: OrgContext
    session_id: str
    config: PipelineConfig
    engines: Engines
    # what the agent said before the caller's first word (the flow's opening), for transports that
    # must speak it (a phone call); empty once the caller has spoken
    greeting: list[str] = field(default_factory=list)


async def open_voiced(state: Any, context: OrgContext, session_id: str) -> Opened:
    """Load the session (active, this organization's), its flow's language, phrases and engines."""
    async with unit_of_work(state.db, write=False) as session:
        try:
            row = await service.open_session(session, context.organization_id, session_id)
            definition = await service.definition_of(session, row)
        except SessionEnded as exc:
            raise Refused(CLOSE_ENDED, exc.detail) from exc
        except NotFound as exc:
            raise Refused(CLOSE_NOT_FOUND, exc.detail) from exc
        except ParleyError as exc:
            raise Refused(CLOSE_ENDED, exc.detail) from exc
        conversation = ConversationState.from_json(row.state)
        language = (row.language or definition.language)[:2]
        # The organization's recording notice comes first, before the flow's greeting, on every voice
        # transport; only at the start of the conversation (not after a failed transfer or once the
        # caller has spoken).
        notice = (
            await privacy.recording_notice(
                session, context.organization_id, row.language or definition.language
            )
            if conversation.transfer is None
            and not any(t.speaker == "caller" for t in conversation.transcript)
            else None
        )
        factory: EnginesFactory | None = getattr(state, "voice_engines", None)
        try:
            if factory is not None:
                engines = factory()
            else:
                chosen = await registry.engines_for_flow(session, state.settings, context, definition.voice)
                engines = Engines(
                    chosen.stt,
                    chosen.tts,
                    WebRtcVad(SAMPLE_RATE),
                    chosen.tts_voice,
                    None if isinstance(chosen.tts, EspeakTts) else EspeakTts(),
                )
        except ParleyError as exc:
            raise Refused(CLOSE_UNAVAILABLE, exc.detail) from exc
    # the flow's opening, or what was said since the caller came back from a failed transfer
    greeting = ([notice] if notice else []) + conversation.opening_lines()
    config = pipeline_config(definition, conversation, language, engines.voice)
    return Opened(context, session_id, config, engines, greeting)


class Playout:
    """Agent audio onto a wire at the rate it is heard: at most ``PLAYOUT_LEAD_S`` ahead of real time
    (what a live call's transport does; voice-mode evaluations pace the agent the same way)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at = clock()

    async def wait(self) -> None:
        """Before one frame goes out: wait while the wire is ``PLAYOUT_LEAD_S`` ahead."""
        now = self.clock()
        self.at = max(self.at, now)
        if self.at - now > PLAYOUT_LEAD_S:
            await asyncio.sleep(self.at - now - PLAYOUT_LEAD_S)

    def sent(self) -> None:
        self.at += FRAME_MS / 1000

    def reset(self) -> None:
        """Barge-in: what was buffered is dropped, the wire is free now."""
        self.at = self.clock()


class Inbox:
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


class VoiceCall(ABC):
    """One voiced session on one connection. Subclasses say how audio and events cross their wire:
    :meth:`receive` (the caller's side, until the caller goes), :meth:`send_audio` (one 20 ms frame of
    the agent at 16 kHz), :meth:`send_event` (every other frame) and :meth:`clear` (barge-in)."""

    def __init__(self, app: Any, opened: Opened, *, record_rate: int = SAMPLE_RATE) -> None:
        self.app = app
        # This leg's start: a transfer requested after it is the dial's to end, not this leg's.
        self.began_at = utcnow()
        self.session_id = opened.session_id
        self.context = opened.context
        self.opened = opened
        self.pipeline = VoicePipeline(
            stt=opened.engines.stt,
            tts=opened.engines.tts,
            vad=opened.engines.vad,
            turns=SessionTurns(app, opened.context, opened.session_id),
            config=opened.config,
            fallback_tts=opened.engines.fallback_tts,
        )
        self.inbox = Inbox(MAX_INPUT_FRAMES)
        # how the session ends when the caller goes and the flow has not ended it
        self.caller_ended = False
        self.end_as: tuple[str, str] | None = None
        # the close code and reason when the transport closes for a reason of its own (bad input)
        self.close_with: tuple[int, str] | None = None
        # spoken output switched off live (POST /api/sessions/{id}/voice, from any process)
        self.muted = False
        self._stopped = asyncio.Event()
        self.stop_reason: str | None = None
        settings = app.state.settings
        self.recorder: StereoRecorder | None = None
        if settings.voice_recording_max_seconds > 0:
            try:
                directory = Path(settings.data_dir) / "tmp"
                directory.mkdir(parents=True, exist_ok=True)
                self.recorder = StereoRecorder(record_rate, settings.voice_recording_max_seconds, directory)
            except OSError as exc:  # no recording rather than no call
                log.warning("voice_recording_unavailable", session_id=self.session_id, error=str(exc))

    # --- the transport's side ----------------------------------------------------------------

    @abstractmethod
    async def receive(self) -> None:
        """The caller's side, until the caller goes."""

    @abstractmethod
    async def send_audio(self, pcm: bytes) -> None:
        """One 20 ms frame of the agent at 16 kHz onto the wire."""

    @abstractmethod
    async def send_event(self, frame: Frame) -> None:
        """Every frame that is not audio, in the transport's own terms."""

    async def clear(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Barge-in: the transport drops the agent audio it still buffers (the event is sent too)."""

    async def start(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Once, before audio flows."""

    async def on_control(self, message: ControlMessage) -> None:
        """A control message from any API process (``/end``, ``/voice``, the idle sweeper), delivered
        through the live-session registry (:mod:`parley.sessions.registry`)."""
        action = message.get("action")
        if action == "end" and not self.pipeline.ended:
            # The session has ended (committed elsewhere): stop speaking and close; nothing to write.
            self.pipeline.ended = True
            self.pipeline.interrupt()
            self.pipeline.out.put(EndFrame(message.get("outcome"), message.get("reason") or "session_ended"))
        elif action == "voice":
            self.muted = not message.get("voiced", True)
            if self.muted and self.pipeline.agent_speaking:
                self.pipeline.interrupt()

    def stop(self, reason: str) -> None:
        """End the call from the server's side (shutdown): the turn in progress is still answered,
        then the session ends as ``failed`` with ``reason`` and the connection closes with 1012."""
        self.stop_reason = reason
        self.end_as = ("failed", reason)
        self.close_with = (CLOSE_SERVICE_RESTART, "The server is restarting.")
        self._stopped.set()

    # --- helpers for transports --------------------------------------------------------------

    def warn(self, code: str, detail: str) -> None:
        self.pipeline.out.put(WarningFrame(code, detail))

    def error(self, code: str, detail: str) -> None:
        self.pipeline.out.put(ErrorFrame(code, detail))

    def heard(self, pcm: bytes) -> None:
        """The caller's audio at the recording's rate, as it arrives."""
        if self.recorder is not None:
            self.recorder.add_caller(pcm)

    def played(self, pcm: bytes) -> None:
        """The agent's audio at the recording's rate, as it goes out."""
        if self.recorder is not None:
            self.recorder.add_agent(pcm)

    def listen(self, pcm16k: bytes) -> None:
        """Caller audio for the pipeline (16 kHz PCM16, any length); warns when some had to go."""
        dropped = self.inbox.add(pcm16k)
        if dropped:
            self.warn(
                "audio_dropped",
                f"Audio arrives faster than it is processed; the oldest {dropped * FRAME_MS} ms were dropped.",
            )

    # --- running -----------------------------------------------------------------------------

    async def _feed(self) -> None:
        while (frame := await self.inbox.get()) is not None:
            await self.pipeline.push_audio(frame)
            if self.pipeline.ended:
                return

    async def _send(self) -> None:
        """Frames out: audio paced to at most ``PLAYOUT_LEAD_S`` ahead of real time, events as they come."""
        playout = Playout()
        while True:
            frame = await self.pipeline.out.get()
            if isinstance(frame, AudioOut):
                if self.muted:
                    continue
                await playout.wait()
                await self.send_audio(frame.pcm)
                playout.sent()
                continue
            if isinstance(frame, Interrupt):
                playout.reset()
                if self.recorder is not None:
                    self.recorder.interrupt()
                await self.clear()
            await self.send_event(frame)
            if isinstance(frame, EndFrame):
                return

    async def run(self) -> None:
        """Until the caller goes or the flow ends; then the session ends (if the flow did not end it).

        The agent speaks the flow's opening as soon as the line is open (whatever the transport), and
        the client hears the ``end`` event whichever side ended the call."""
        await self.start()
        if self.close_with is None:
            self.pipeline.speak(self.opened.greeting)
            self.pipeline.start()
        live = registry_for(self.app.state)
        await live.hold(self.session_id, self.on_control)
        receiver = asyncio.create_task(self.receive())
        feeder = asyncio.create_task(self._feed())
        sender = asyncio.create_task(self._send())
        stopper = asyncio.create_task(self._stopped.wait())
        try:
            await asyncio.wait({receiver, sender, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await live.release(self.session_id, self.on_control)
            # The caller is gone (or the flow ended): answer what was said, then end the session.
            self.inbox.close()
            await asyncio.gather(feeder, return_exceptions=True)
            await self.pipeline.finish_input()
            await self.pipeline.drain()
            await self.pipeline.aclose()
            for task in (receiver, sender, stopper):
                task.cancel()
            await asyncio.gather(receiver, sender, stopper, return_exceptions=True)
            if self.pipeline.hangup is not None:  # the pipeline said goodbye (and sent `end`)
                self.end_as = self.pipeline.hangup
                await self._end_session()
            elif not self.pipeline.ended:
                outcome, reason = await self._end_session()
                # tell the client how it ended, before the close (a client that hung up hears nothing)
                with contextlib.suppress(Exception):
                    await self.send_event(EndFrame(outcome, reason))

    async def _end_session(self) -> tuple[str, str]:
        """End the session as the caller's going (or ``end_as``) says; answer the outcome and reason."""
        if self.end_as is not None:
            outcome, reason = self.end_as
        elif self.caller_ended:
            outcome, reason = "abandoned", "caller_ended"  # left before the flow's end
        else:
            outcome, reason = "abandoned", "caller_hung_up"
        state = self.app.state
        try:
            # A stream that stops because the call was handed to a dial leaves the session to the
            # dial's result (parley.telephony.handover), and to the leg that takes the caller back.
            async with (
                locks.hold(self.session_id),
                unit_of_work(state.db, jobs=runner_for(state)) as session,
            ):
                await service.end_session(
                    session,
                    self.context.organization_id,
                    self.session_id,
                    outcome=outcome,
                    reason=reason,
                    unless_handed_over_since=self.began_at,
                )
        except SessionEnded:
            pass
        except Exception as exc:  # the idle sweeper ends it later
            log.warning("voice_session_end_failed", session_id=self.session_id, error_type=type(exc).__name__)
        return outcome, reason

    # --- the call record ---------------------------------------------------------------------

    def turn_metrics(self) -> list[dict[str, Any]]:
        """The voice figures of every answered turn, keyed by the call record's ``turn_index``."""
        return [
            {"turn_index": t.metrics_index, "engine_ms": t.engine_ms, **t.voice().model_dump()}
            for t in self.pipeline.timings
            if t.metrics_index is not None
        ]

    async def persist(self) -> None:
        """After the session ended: the recording to blob storage, metrics and recording onto the call
        record. A failing blob store costs the recording, never the call record or its metrics."""
        path = self.recorder.finish() if self.recorder is not None else None
        state = self.app.state
        organization_id = self.context.organization_id
        try:
            if not await self._recorded():
                # The session's end failed (or a transfer holds it): end it once more, so its record
                # gets this call's measured figures instead of the idle sweeper recording it without.
                await self._end_session()
                if not await self._recorded():  # a transfer's result ends it; the sweeper otherwise
                    log.warning("voice_call_record_missing", session_id=self.session_id)
                    # that end sends call.ended without waiting (unless the caller is back on a new leg)
                    await self.mark_connected(False)
                    return
            filename = await self._upload(path) if path is not None else None
            for attempt in (1, 2):  # one retry: a lost write costs the caller's figures and the event's
                try:
                    async with unit_of_work(state.db, jobs=runner_for(state)) as session:
                        await attach_voice(
                            session,
                            organization_id,
                            self.session_id,
                            metrics=self.turn_metrics(),
                            recording_filename=filename,
                            tts_characters=self.pipeline.usage.tts_characters,
                            stt_seconds=self.pipeline.usage.stt_seconds,
                        )
                    break
                except Exception as exc:
                    log.warning(
                        "voice_call_record_update_failed",
                        session_id=self.session_id,
                        attempt=attempt,
                        error_type=type(exc).__name__,
                    )
        except Exception as exc:
            log.warning(
                "voice_call_record_update_failed", session_id=self.session_id, error_type=type(exc).__name__
            )
        finally:
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()

    async def mark_connected(self, connected: bool = True) -> None:
        """Note on the session that this transport will attach its voice facts (call.ended waits), or
        that it will not (its stream stopped while the session goes on, e.g. for a transfer)."""
        try:
            async with unit_of_work(self.app.state.db) as session:
                await service.mark_voice_connected(
                    session,
                    self.context.organization_id,
                    self.session_id,
                    connected,
                    unless_handed_over_since=None if connected else self.began_at,
                )
        except Exception as exc:  # call.ended then goes out when the session ends, without them
            log.warning(
                "voice_connected_not_noted", session_id=self.session_id, error_type=type(exc).__name__
            )

    async def _recorded(self) -> bool:
        async with unit_of_work(self.app.state.db, write=False) as session:
            found = await call_of_session(session, self.context.organization_id, self.session_id)
        return found is not None

    async def _upload(self, path: Path) -> str | None:
        filename = f"{self.session_id}.wav"
        key = recording_blob_key(self.context.organization_id, filename)
        try:
            data = await asyncio.to_thread(path.read_bytes)
            await self.app.state.blobs.put(key, data, "audio/wav")
        except Exception as exc:
            log.warning(
                "voice_recording_not_stored", session_id=self.session_id, error_type=type(exc).__name__
            )
            return None
        return filename


def refuse_if_draining(app: Any) -> None:
    """New voice connections are refused while the process shuts down (another one will answer)."""
    if lifecycle_of(app).draining:
        raise Refused(CLOSE_UNAVAILABLE, "The server is shutting down; connect again to reach another one.")


async def converse(websocket: WebSocket, call: VoiceCall, transport: str = "websocket") -> None:
    """Run ``call`` on an accepted ``websocket``, close it, then complete the call record."""
    if call.session_id in _CONNECTED:
        if call.recorder is not None:
            call.recorder.discard()
        await websocket.close(code=CLOSE_ENDED, reason="This session already has a voice connection.")
        return
    _CONNECTED.add(call.session_id)
    try:
        await call.mark_connected()
        with lifecycle_of(call.app).track(call, transport), contextlib.suppress(WebSocketDisconnect):
            await call.run()
        if websocket.client_state == WebSocketState.CONNECTED:
            code, reason = call.close_with or (1000, "")
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close(code=code, reason=reason[:120])
    finally:
        _CONNECTED.discard(call.session_id)
    await call.persist()
