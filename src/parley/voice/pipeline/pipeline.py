"""The voice pipeline: caller audio in, the agent's audio out, one conversation turn per utterance.

Stages, frame by frame: transport-in (20 ms PCM16 frames) → VAD and endpointing
(:class:`SpeechSegmenter`) → streaming STT (partial and final transcripts) → end of turn → the
session's turn through a :class:`TurnPort` → streaming TTS (cancellable) → transport-out (a
:class:`FrameQueue`).

**Barge-in**: when the segmenter detects caller speech while the agent is speaking (synthesis still
running, or audio handed out that the caller cannot have heard yet), the synthesis is cancelled, the
agent audio still queued is dropped and an :class:`Interrupt` frame tells the transport to clear what
it buffers — in the same step as the VAD decision, so no further agent frame follows it.

Per-turn metrics (milliseconds): ``stt_final_ms`` end of speech → final transcript,
``stt_engine_ms`` time spent inside the STT engine's calls for the utterance, ``engine_ms`` the flow
engine, ``llm_first_token_ms`` when the runtime reports it, ``tts_first_byte_ms`` from the reply to
the first synthesized audio, ``voice_to_voice_ms`` end of caller speech → first agent audio. Each
answered turn's figures are kept in :attr:`VoicePipeline.timings` (for the call record).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from parley.kit.metrics import observe_turn
from parley.runtime.engine import AgentEvent, TurnResult
from parley.voice.engines.base import SttEngine, SttStream, TtsEngine, Vad
from parley.voice.engines.vad import SpeechSegmenter
from parley.voice.pipeline.frames import (
    AgentSpoken,
    AgentText,
    AudioOut,
    EndFrame,
    ErrorFrame,
    Frame,
    FrameQueue,
    Interrupt,
    MetricsFrame,
    SpeechEnded,
    SpeechStarted,
    ToolCallFrame,
    TranscriptFrame,
)

log = structlog.get_logger("parley.voice.pipeline")


@dataclass
class TurnReply:
    """What the runtime answered to one caller utterance."""

    result: TurnResult
    ended: bool = False
    outcome: str | None = None
    reason: str | None = None
    # the words the caller is expected to say next (a grammar for engines that take one); None: any
    phrases: Sequence[str] | None = None
    # the ``turn_index`` of this turn's entry in the session's (and call record's) turn metrics
    metrics_index: int | None = None


class TurnPort(Protocol):
    async def turn(self, text: str) -> TurnReply:
        """Run the session's turn for the caller's ``text``; raise a ``ParleyError`` when it fails."""
        ...


@dataclass(frozen=True)
class PipelineConfig:
    sample_rate: int = 16000
    frame_ms: int = 20
    language: str | None = None
    phrases: Sequence[str] | None = None
    voice: str | None = None
    # endpointing (SpeechSegmenter)
    start_ms: int = 60
    stop_ms: int = 600
    preroll_ms: int = 300
    # at most this much agent audio waits in the output queue (back-pressure on the synthesis)
    max_ahead_ms: int = 400

    @property
    def frame_bytes(self) -> int:
        return self.sample_rate * self.frame_ms // 1000 * 2


@dataclass
class TurnTimings:
    """One answered utterance's latency figures (milliseconds), from the pipeline's clock."""

    speech_end: float
    turn: int = 0
    metrics_index: int | None = None
    stt_final_ms: float | None = None
    stt_engine_ms: float | None = None
    engine_ms: float | None = None
    llm_first_token_ms: float | None = None
    tts_first_byte_ms: float | None = None
    voice_to_voice_ms: float | None = None
    interrupted: bool = False

    def as_dict(self) -> dict[str, float | None]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 1)

        return {
            "stt_final_ms": r(self.stt_final_ms),
            "stt_engine_ms": r(self.stt_engine_ms),
            "engine_ms": r(self.engine_ms),
            "llm_first_token_ms": r(self.llm_first_token_ms),
            "tts_first_byte_ms": r(self.tts_first_byte_ms),
            "voice_to_voice_ms": r(self.voice_to_voice_ms),
        }


@dataclass
class _Utterance:
    stream: SttStream
    reader: asyncio.Task[str]
    partial_texts: list[str] = field(default_factory=list)
    engine_s: float = 0.0  # time spent in the STT stream's feed() and finish() calls


class VoicePipeline:
    """One caller's audio stream; feed it with :meth:`push_audio`, read ``out`` for what to send."""

    def __init__(
        self,
        *,
        stt: SttEngine,
        tts: TtsEngine,
        vad: Vad,
        turns: TurnPort,
        out: FrameQueue | None = None,
        config: PipelineConfig | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config or PipelineConfig()
        self.stt, self.tts, self.turns = stt, tts, turns
        self.out = out or FrameQueue()
        self.clock = clock
        self.segmenter = SpeechSegmenter(
            vad,
            frame_ms=self.config.frame_ms,
            frame_bytes=self.config.frame_bytes,
            start_ms=self.config.start_ms,
            stop_ms=self.config.stop_ms,
            preroll_ms=self.config.preroll_ms,
        )
        self.phrases = self.config.phrases
        self.turn_index = 0
        self.ended = False
        self.interruptions = 0
        self._utterance: _Utterance | None = None
        self._turn_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._speaking: asyncio.Task[None] | None = None
        self._speaking_turn = 0
        self._playout_until = 0.0
        self._frames_in = 0
        self.timings: list[TurnTimings] = []
        self.muted = False  # nobody listens any more (hang-up): answers are committed, not spoken

    # --- transport-in ------------------------------------------------------------------------

    @property
    def frames_in(self) -> int:
        return self._frames_in

    @property
    def agent_speaking(self) -> bool:
        running = self._speaking is not None and not self._speaking.done()
        return running or self.clock() < self._playout_until

    async def push_audio(self, frame: bytes) -> None:
        """One frame of caller audio (``config.frame_bytes`` bytes of PCM16 mono)."""
        if self.ended:
            return
        if len(frame) != self.config.frame_bytes:
            raise ValueError(f"a pipeline frame is {self.config.frame_bytes} bytes")
        self._frames_in += 1
        event = self.segmenter.process(frame)
        if event is not None and event.kind == "start":
            self._emit(SpeechStarted(event.at_ms))
            if self.agent_speaking:
                self.interrupt()
            await self._open_utterance(event.audio)
            return
        if self._utterance is not None:
            started = self.clock()
            self._utterance.stream.feed(frame)
            self._utterance.engine_s += self.clock() - started
        if event is not None and event.kind == "end":
            self._emit(SpeechEnded(event.at_ms))
            self._close_utterance()

    def interrupt(self) -> None:
        """Barge-in: stop the agent's speech at once and tell the transport to drop its buffer."""
        task = self._speaking
        if task is not None and not task.done():
            task.cancel()
        self._playout_until = 0.0
        self.interruptions += 1
        self.out.put(Interrupt(self._speaking_turn))  # drops the queued agent audio as well

    # --- VAD → STT -----------------------------------------------------------------------------

    async def _open_utterance(self, preroll: bytes) -> None:
        try:
            stream = await self.stt.open_stream(
                self.config.language, self.config.sample_rate, phrases=self.phrases
            )
        except Exception as exc:  # an engine failure: say so, keep listening
            self._emit(ErrorFrame("stt_unavailable", _safe(exc, "Speech recognition is not available.")))
            return
        started = self.clock()
        stream.feed(preroll)
        utterance = _Utterance(stream, asyncio.create_task(self._read(stream)))
        utterance.engine_s = self.clock() - started
        self._utterance = utterance

    async def _read(self, stream: SttStream) -> str:
        finals: list[str] = []
        async for transcript in stream:
            text = transcript.text.strip()
            if not text:
                continue
            if transcript.is_final:
                finals.append(text)
            self._emit(TranscriptFrame(text, transcript.is_final))
        return " ".join(finals)

    def _close_utterance(self) -> None:
        utterance, self._utterance = self._utterance, None
        if utterance is None:
            return
        speech_end = self.clock()
        self._spawn(self._respond(utterance, speech_end))

    # --- end of turn → runtime → TTS -----------------------------------------------------------

    async def _respond(self, utterance: _Utterance, speech_end: float) -> None:
        metrics = TurnTimings(speech_end)
        try:
            started = self.clock()
            await utterance.stream.finish()
            utterance.engine_s += self.clock() - started
            text = await utterance.reader
        except Exception as exc:
            self._emit(ErrorFrame("stt_failed", _safe(exc, "Speech recognition failed for that utterance.")))
            return
        finally:
            await utterance.stream.aclose()
        metrics.stt_final_ms = (self.clock() - speech_end) * 1000
        metrics.stt_engine_ms = utterance.engine_s * 1000
        if text:
            await self._answer(text, metrics)

    def push_text(self, text: str) -> None:
        """The caller's answer without speech (telephone keys): a turn, as if it had been said."""
        if self.ended or not text:
            return
        if self.agent_speaking:
            self.interrupt()
        self._spawn(self._answer(text, TurnTimings(self.clock())))

    async def _answer(self, text: str, metrics: TurnTimings) -> None:
        async with self._turn_lock:
            if self.ended:
                return
            try:
                reply = await self.turns.turn(text)
            except Exception as exc:
                self._emit(ErrorFrame(_code(exc), _safe(exc, "The turn could not be run; say it again.")))
                if _code(exc) == "session_ended":  # ended elsewhere (/end, the idle sweeper)
                    self.ended = True
                    self._emit(EndFrame(None, "session_ended"))
                return
            self.turn_index += 1
            self.phrases = reply.phrases
            metrics.turn, metrics.metrics_index = self.turn_index, reply.metrics_index
            metrics.engine_ms = reply.result.engine_ms
            metrics.llm_first_token_ms = reply.result.llm_first_token_ms
            speaking = asyncio.create_task(self._speak(self.turn_index, reply, metrics))
            self._speaking, self._speaking_turn = speaking, self.turn_index
        try:
            await asyncio.shield(speaking)
        except asyncio.CancelledError:
            if not speaking.cancelled():
                raise
        self.timings.append(metrics)
        self._emit(MetricsFrame(metrics.turn, metrics.as_dict()))
        # The engine stages are counted by the runtime; the voice stages are this pipeline's.
        observe_turn(
            {
                "stt_final_ms": metrics.stt_final_ms,
                "tts_first_byte_ms": metrics.tts_first_byte_ms,
                "voice_to_voice_ms": metrics.voice_to_voice_ms,
            }
        )
        if reply.ended:
            self.ended = True
            self._emit(EndFrame(reply.outcome, reply.reason))

    async def _speak(self, turn: int, reply: TurnReply, metrics: TurnTimings) -> None:
        started = self.clock()
        frame_bytes = self.config.frame_bytes
        max_ahead = max(1, self.config.max_ahead_ms // self.config.frame_ms)
        for event in reply.result.events:
            if event.type == "tool_call":
                self._emit(ToolCallFrame(event.data, event.node_id))
                continue
            if event.type != "say" or not event.text:
                continue
            self._emit(AgentText(event.text, turn, event.node_id))
            if self.muted:
                continue
            pending = b""
            chunks = self.tts.synthesize(
                event.text,
                voice=self.config.voice,
                language=self.config.language,
                sample_rate=self.config.sample_rate,
            )
            try:
                async for chunk in chunks:
                    pending += chunk
                    while len(pending) >= frame_bytes:
                        frame, pending = pending[:frame_bytes], pending[frame_bytes:]
                        await self._send_audio(frame, turn, metrics, started, max_ahead)
                if pending:
                    await self._send_audio(
                        pending.ljust(frame_bytes, b"\0"), turn, metrics, started, max_ahead
                    )
            except asyncio.CancelledError:
                metrics.interrupted = True
                raise
            except Exception as exc:
                self._emit(ErrorFrame(_code(exc), _safe(exc, "Speech synthesis failed.")))
                return
            finally:
                await _aclose(chunks)
            self._emit(AgentSpoken(turn))

    async def _send_audio(
        self, frame: bytes, turn: int, metrics: TurnTimings, started: float, max_ahead: int
    ) -> None:
        await self.out.wait_below(max_ahead)  # back-pressure: the transport reads at its pace
        now = self.clock()
        if metrics.tts_first_byte_ms is None:
            metrics.tts_first_byte_ms = (now - started) * 1000
            metrics.voice_to_voice_ms = (now - metrics.speech_end) * 1000
        self.out.put(AudioOut(frame, turn))
        self._playout_until = max(self._playout_until, now) + self.config.frame_ms / 1000

    # --- life cycle ----------------------------------------------------------------------------

    def _emit(self, frame: Frame) -> None:
        self.out.put(frame)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def speak(self, texts: Sequence[str]) -> None:
        """Say ``texts`` outside a caller's turn (a phone call's greeting); barge-in applies to it."""
        said = [t for t in texts if t]
        if not said or self.ended:
            return
        reply = TurnReply(TurnResult(events=[AgentEvent("say", None, t) for t in said]))
        speaking = asyncio.create_task(self._speak(self.turn_index, reply, TurnTimings(self.clock())))
        self._speaking, self._speaking_turn = speaking, self.turn_index
        self._tasks.add(speaking)
        speaking.add_done_callback(self._tasks.discard)

    async def finish_input(self) -> None:
        """The caller's audio ended (hang-up): nothing more is spoken, and an utterance in progress is
        still recognised and answered (its turn commits)."""
        self.muted = True
        if self._speaking is not None and not self._speaking.done():
            self._speaking.cancel()
        if self._utterance is not None:
            self._emit(SpeechEnded(self._frames_in * self.config.frame_ms))
            self._close_utterance()

    async def drain(self) -> None:
        """Wait for the turns already started (their answers are still produced and saved)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop speaking and drop work in progress (the turns already running still commit)."""
        if self._speaking is not None and not self._speaking.done():
            self._speaking.cancel()
        if self._utterance is not None:
            utterance, self._utterance = self._utterance, None
            utterance.reader.cancel()
            await utterance.stream.aclose()


async def _aclose(iterator: AsyncIterator[bytes]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # pragma: no cover - closing a broken engine
            log.warning("tts_close_failed")


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "code", "") or "pipeline_error")


def _safe(exc: BaseException, default: str) -> str:
    detail = getattr(exc, "detail", None)
    return detail if isinstance(detail, str) and detail else default
