"""The voice pipeline: caller audio in, the agent's audio out, one conversation turn per utterance.

Stages, frame by frame: transport-in (20 ms PCM16 frames) → VAD and endpointing
(:class:`SpeechSegmenter`) → streaming STT (partial and final transcripts) → end of turn → the
session's turn through a :class:`TurnPort` → streaming TTS (cancellable) → transport-out (a
:class:`FrameQueue`).

**Endpointing** knows what it waits for: when the current collect node's answer is already complete
in the partial transcript (all its digits, a yes/no, one of its choices: :class:`Expect`) the turn is
taken after the short hangover, otherwise after the normal one.

**Barge-in**: when the caller has spoken over the agent for ``barge_in_min_ms`` (synthesis still
running, or audio handed out that the caller cannot have heard yet), the synthesis is cancelled, the
agent audio still queued is dropped and an :class:`Interrupt` frame tells the transport to clear what
it buffers — in the same step as the VAD decision, so no further agent frame follows it. An
interruption whose transcript has fewer than ``barge_in_min_words`` words (a cough, noise) was false:
the agent says the interrupted sentence again. An expected answer ("yes") said over the agent before
its question started playing is no answer to that question: the question is asked again.

**Never silent**: a failed recognition, synthesis or turn is spoken (:class:`SpokenLines`), a vendor
voice that fails falls back to ``fallback_tts``, a slow turn gets a filler line, a silent caller is
prompted again and, after ``max_reprompts``, told goodbye (the call ends ``caller_silent``).

Per-turn metrics (milliseconds): ``stt_final_ms`` end of speech → final transcript,
``stt_engine_ms`` time spent inside the STT engine's calls for the utterance, ``engine_ms`` the flow
engine, ``llm_first_token_ms`` when the runtime reports it, ``tts_first_byte_ms`` from the reply to
the first synthesized audio, ``hangover_ms`` the caller's last voiced frame → end of turn (the
endpointing wait), ``voice_to_voice_ms`` the caller's last voiced frame → first agent audio. Each
answered turn's figures are kept in :attr:`VoicePipeline.timings` (for the call record).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import structlog

from parley.calls.contracts import VoiceTurnMetrics
from parley.kit.metrics import observe_turn
from parley.runtime.engine import AgentEvent, TextSink, TurnResult
from parley.voice.engines.base import SttEngine, SttStream, TtsEngine, Vad
from parley.voice.engines.vad import SegmentEvent, SpeechSegmenter
from parley.voice.lines import SpokenLines
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
    WarningFrame,
)

log = structlog.get_logger("parley.voice.pipeline")

MAX_FAILURES = 3  # failed turns (or recognitions) in a row, then the call ends politely

_DIGIT_WORDS = {
    **{
        w: str(i)
        for i, w in enumerate(
            ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
        )
    },
    "oh": "0",
    **{
        w: str(i)
        for i, w in enumerate(
            ("null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun")
        )
    },
    "zwo": "2",
    "ein": "1",
}
_YES_NO = {"yes", "yeah", "yep", "no", "nope", "ja", "jawohl", "genau", "nein", "nee"}


@dataclass(frozen=True)
class Expect:
    """What the current collect node waits for (None fields: no such constraint)."""

    kind: str | None = None
    phrases: Sequence[str] | None = None
    min_digits: int | None = None
    max_digits: int | None = None
    choices: Sequence[str] | None = None
    # the node's own endpointing (over the flow's)
    hangover_ms: int | None = None
    short_hangover_ms: int | None = None

    def _digits(self, text: str) -> str | None:
        out = []
        for word in text.lower().replace("-", " ").split():
            if word.isdigit():
                out.append(word)
            elif word in _DIGIT_WORDS:
                out.append(_DIGIT_WORDS[word])
            else:
                return None
        return "".join(out) or None

    def complete(self, text: str) -> bool:
        """``text`` is already a whole answer: the turn need not wait the full hangover."""
        if not text.strip():
            return False
        if self.kind in ("digits", "number"):
            digits = self._digits(text)
            if digits is None:
                return False
            # A number is whole only when no further digit could belong to it: it has reached the node's
            # maximum. Within a range ("1 to 12 digits") a pause after "one" may be the middle of
            # "one two", so the caller gets the full hangover.
            if self.max_digits is None:
                return False
            return len(digits) >= self.max_digits
        return self.answers(text)

    def answers(self, text: str) -> bool:
        """``text`` reads as an answer to this node's question (not merely speech)."""
        words = text.lower().split()
        if not words:
            return False
        if self.kind in ("digits", "number"):
            return self._digits(text) is not None
        if self.kind == "yes_no":
            return len(words) <= 3 and any(w.strip(".,!?") in _YES_NO for w in words)
        if self.kind == "choice" and self.choices:
            said = " ".join(words)
            return any(choice.lower() == said for choice in self.choices)
        return False


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
    # what the next question waits for (endpointing); None: a free answer
    expect: Expect | None = None


class TurnPort(Protocol):
    async def turn(self, text: str) -> TurnReply:
        """Run the session's turn for the caller's ``text``; raise a ``ParleyError`` when it fails."""
        ...


@runtime_checkable
class StreamingTurnPort(TurnPort, Protocol):
    """A turn port whose ``llm`` answers arrive piece by piece: ``on_text(node_id, piece)``."""

    async def stream_turn(self, text: str, on_text: TextSink) -> TurnReply: ...


_SENTENCE_END = re.compile(r"(?<=[.!?…:;])\s+")


class _Generated:
    """An ``llm`` answer's sentences as they are generated, queued for speaking before the turn ends."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}  # per node: text not yet a whole sentence
        self.spoken: dict[str, str] = {}  # per node: the sentences handed to synthesis
        self.sentences: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self.count = 0
        self.finished = asyncio.Event()  # every queued sentence has been spoken (or dropped)
        self.interrupted = False  # the caller cut a sentence off: the rest is not said

    async def add(self, node_id: str, piece: str) -> None:
        text = self.pending.get(node_id, "") + piece
        *whole, rest = _SENTENCE_END.split(text)
        self.pending[node_id] = rest
        for sentence in whole:
            if sentence.strip():
                self.spoken[node_id] = self.spoken.get(node_id, "") + sentence + " "
                self.count += 1
                self.sentences.put_nowait((node_id, sentence.strip()))

    def rest_of(self, node_id: str | None, text: str) -> str:
        """What of the final ``text`` was not spoken yet (all of it when it differs from the stream)."""
        spoken = " ".join(self.spoken.get(node_id or "", "").split())
        said = " ".join(text.split())
        if spoken and said.startswith(spoken):
            return said[len(spoken) :].strip()
        return text


@dataclass(frozen=True)
class PipelineConfig:
    sample_rate: int = 16000
    frame_ms: int = 20
    language: str | None = None
    phrases: Sequence[str] | None = None
    voice: str | None = None
    # endpointing (SpeechSegmenter): the normal hangover, and the short one once the answer is complete
    start_ms: int = 60
    stop_ms: int = 600
    short_stop_ms: int = 220
    preroll_ms: int = 300
    # at most this much agent audio waits in the output queue (back-pressure on the synthesis)
    max_ahead_ms: int = 400
    # barge-in: caller speech (ms, from its start) and words needed to interrupt the agent
    barge_in_min_ms: int = 300
    barge_in_min_words: int = 1
    # a turn slower than this gets a filler line (0: never); a caller silent this long is prompted
    # again (0: never; only once :meth:`VoicePipeline.start` ran), at most ``max_reprompts`` times
    filler_after_ms: int = 1500
    reprompt_after_ms: int = 6000
    max_reprompts: int = 2
    expect: Expect | None = None
    lines: SpokenLines = field(default_factory=lambda: SpokenLines.for_language("en"))

    @property
    def frame_bytes(self) -> int:
        return self.sample_rate * self.frame_ms // 1000 * 2


@dataclass
class SpeechUsage:
    """What a call cost in speech, counted where the pipeline hands work to the engines, so every
    engine (espeak, pocketsphinx, Deepgram, the OpenAI-compatible vendors...) is measured the same way:
    the characters of every text given to synthesis (also when the caller interrupts it), and the
    caller audio given to recognition (pre-roll and frames of each utterance; silence between
    utterances never reaches the recognizer and is not counted)."""

    sample_rate: int
    tts_characters: int = 0
    tts_requests: int = 0
    stt_bytes: int = 0
    stt_streams: int = 0

    @property
    def stt_seconds(self) -> float:
        return round(self.stt_bytes / (2 * self.sample_rate), 3)


@dataclass
class TurnTimings:
    """One answered utterance: the pipeline's clock marks and its figures in the one voice-metrics
    shape (:class:`VoiceTurnMetrics`, as on the call record and in Prometheus)."""

    speech_end: float
    # the caller's last voiced frame (the clock of voice_to_voice); speech_end when unknown
    last_voiced: float | None = None
    turn: int = 0
    metrics_index: int | None = None
    engine_ms: float | None = None
    figures: VoiceTurnMetrics = field(default_factory=VoiceTurnMetrics)

    @property
    def interrupted(self) -> bool:
        return bool(self.figures.interrupted)

    def voice(self) -> VoiceTurnMetrics:
        """The figures rounded to 0.1 ms; ``interrupted`` always set."""
        data = {
            key: round(value, 1) if isinstance(value, float) else value
            for key, value in self.figures.model_dump().items()
        }
        data["interrupted"] = bool(data["interrupted"])
        return VoiceTurnMetrics.model_validate(data)

    def as_dict(self) -> dict[str, Any]:
        """The ``metrics`` event: the voice figures and the flow engine's time."""
        engine = None if self.engine_ms is None else round(self.engine_ms, 1)
        return {"engine_ms": engine, **self.voice().model_dump()}


@dataclass
class _Utterance:
    stream: SttStream
    last_voiced: float
    expect: Expect | None
    reader: asyncio.Task[str] | None = None
    latest: str = ""  # the newest transcript (partial or final)
    engine_s: float = 0.0  # time spent in the STT stream's feed() and finish() calls
    voiced_ms: int = 0
    over_agent: bool = False  # began while the agent was speaking
    question_heard: bool = True  # the agent's last sentence had begun to play when it began
    interrupted: bool = False
    resume: list[str] = field(default_factory=list)  # said again after a false interruption


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
        fallback_tts: TtsEngine | None = None,
    ) -> None:
        self.config = config or PipelineConfig()
        self.stt, self.tts, self.turns = stt, tts, turns
        self.fallback_tts = fallback_tts
        self.lines = self.config.lines
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
        self.expect: Expect | None = None
        self._set_expect(self.config.expect, self.config.phrases)
        self.turn_index = 0
        self.ended = False
        # the pipeline ended the call itself (a silent caller, failures): (outcome, reason) to record
        self.hangup: tuple[str, str] | None = None
        self.interruptions = 0
        self.false_interruptions = 0
        self.reprompts = 0
        self.fillers = 0
        self._failures = 0
        self._utterance: _Utterance | None = None
        self._turn_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._speaking: asyncio.Task[None] | None = None
        self._speaking_turn = 0
        self._playout_until = 0.0
        self._frames_in = 0
        # the sentences of what the agent says now, and when each began to play (for barge-in)
        self._says: list[str] = []
        self._starts: list[float] = []
        self._question: list[str] = []  # the last reply's last sentence (asked again on a re-prompt)
        self._last_activity = self.clock()
        self._watcher: asyncio.Task[None] | None = None
        self._generating: asyncio.Task[TurnReply] | None = None  # the turn running now
        self._streaming: asyncio.Task[None] | None = None  # a generated sentence being spoken
        self.timings: list[TurnTimings] = []
        self.usage = SpeechUsage(self.config.sample_rate)
        self.muted = False  # nobody listens any more (hang-up): answers are committed, not spoken

    # --- transport-in ------------------------------------------------------------------------

    @property
    def frames_in(self) -> int:
        return self._frames_in

    @property
    def agent_speaking(self) -> bool:
        running = self._speaking is not None and not self._speaking.done()
        return running or self.clock() < self._playout_until

    @property
    def listening(self) -> bool:
        """An utterance is in progress: the endpointing needs more audio to close it."""
        return self._utterance is not None or self.segmenter.in_speech

    @property
    def working(self) -> bool:
        """A turn, its recognition or the agent's speech is being produced."""
        return self._turn_lock.locked() or any(not t.done() for t in self._tasks)

    @property
    def busy(self) -> bool:
        """Listening, working or still playing the agent's audio."""
        return self._busy()

    def expecting(self, expect: Expect | None, phrases: Sequence[str] | None) -> None:
        """What the next answer is (a turn answered outside the pipeline, e.g. a silent caller's)."""
        self._set_expect(expect, phrases)

    def _set_expect(self, expect: Expect | None, phrases: Sequence[str] | None) -> None:
        if expect is None and phrases is not None:
            expect = Expect(phrases=phrases)
        self.expect, self.phrases = expect, phrases if phrases is not None else None
        hangover = (expect.hangover_ms if expect else None) or self.config.stop_ms
        self.segmenter.set_hangover(hangover)

    async def push_audio(self, frame: bytes) -> None:
        """One frame of caller audio (``config.frame_bytes`` bytes of PCM16 mono)."""
        if self.ended:
            return
        if len(frame) != self.config.frame_bytes:
            raise ValueError(f"a pipeline frame is {self.config.frame_bytes} bytes")
        self._frames_in += 1
        event = self.segmenter.process(frame)
        now = self.clock()
        if event is not None and event.kind == "start":
            self._emit(SpeechStarted(event.at_ms))
            self._last_activity = now
            self.reprompts = 0  # the caller is there
            await self._open_utterance(event.audio, now)
            utterance = self._utterance
            if utterance is not None and utterance.over_agent:
                self._maybe_barge_in(utterance)
            elif utterance is None and self.agent_speaking:  # no recognizer: speech still interrupts
                self.interrupt()
            return
        utterance = self._utterance
        if utterance is not None:
            started = self.clock()
            utterance.stream.feed(frame)
            self.usage.stt_bytes += len(frame)
            utterance.engine_s += self.clock() - started
            if self.segmenter.voiced:
                utterance.last_voiced = now
                utterance.voiced_ms += self.config.frame_ms
            if utterance.over_agent and not utterance.interrupted:
                self._maybe_barge_in(utterance)
            if event is None and self._answer_complete(utterance):
                event = self.segmenter.end_now()
        if event is not None and event.kind == "end":
            self._end_of_speech(event)

    def _answer_complete(self, utterance: _Utterance) -> bool:
        expect = utterance.expect
        if expect is None or not self.segmenter.in_speech:
            return False
        short = expect.short_hangover_ms or self.config.short_stop_ms
        return self.segmenter.silent_ms >= short and expect.complete(utterance.latest)

    def _end_of_speech(self, event: SegmentEvent) -> None:
        self._emit(SpeechEnded(event.at_ms))
        self._last_activity = self.clock()
        self._close_utterance()

    def _maybe_barge_in(self, utterance: _Utterance) -> None:
        """Interrupt the agent once the caller has spoken over it long enough."""
        if utterance.voiced_ms >= self.config.barge_in_min_ms and self.agent_speaking:
            utterance.interrupted = True
            self.interrupt()

    def interrupt(self) -> None:
        """Barge-in: stop the agent's speech at once and tell the transport to drop its buffer."""
        task = self._speaking
        if task is not None and not task.done():
            task.cancel()
        if self._generating is not None and self._streaming is not None:
            self._generating.cancel()  # an answer spoken while generated: stop generating it too
        self._playout_until = 0.0
        self.interruptions += 1
        self.out.put(Interrupt(self._speaking_turn))  # drops the queued agent audio as well

    def _heard(self, now: float) -> tuple[list[str], bool]:
        """What the agent says again after a false interruption now (from the sentence playing), and
        whether its last sentence (the question) had begun to play."""
        says, started = self._says, [t for t in self._starts if t <= now]
        if not says:
            return [], True
        question_heard = len(started) == len(says)
        return says[max(0, len(started) - 1) :], question_heard

    # --- VAD → STT -----------------------------------------------------------------------------

    async def _open_utterance(self, preroll: bytes, now: float) -> None:
        over_agent = self.agent_speaking
        try:
            stream = await self.stt.open_stream(
                self.config.language, self.config.sample_rate, phrases=self.phrases
            )
        except Exception as exc:  # an engine failure: say so, keep listening
            self._emit(ErrorFrame("stt_unavailable", _safe(exc, "Speech recognition is not available.")))
            self._spawn(self._failed(self.lines.not_heard, "stt_failed"))
            return
        started = self.clock()
        stream.feed(preroll)
        self.usage.stt_streams += 1
        self.usage.stt_bytes += len(preroll)
        utterance = _Utterance(stream, now, self.expect, voiced_ms=self.config.start_ms)
        utterance.engine_s = self.clock() - started
        if over_agent:
            utterance.over_agent = True
            utterance.resume, utterance.question_heard = self._heard(now)
        utterance.reader = asyncio.create_task(self._read(utterance))
        self._utterance = utterance

    async def _read(self, utterance: _Utterance) -> str:
        finals: list[str] = []
        async for transcript in utterance.stream:
            text = transcript.text.strip()
            if not text:
                continue
            if transcript.is_final:
                finals.append(text)
                utterance.latest = " ".join(finals)
            else:
                utterance.latest = " ".join([*finals, text])
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
        metrics = TurnTimings(speech_end, last_voiced=utterance.last_voiced)
        metrics.figures.hangover_ms = (speech_end - utterance.last_voiced) * 1000
        try:
            started = self.clock()
            await utterance.stream.finish()
            utterance.engine_s += self.clock() - started
            assert utterance.reader is not None
            text = await utterance.reader
        except Exception as exc:
            self._emit(ErrorFrame("stt_failed", _safe(exc, "Speech recognition failed for that utterance.")))
            await self._failed(self.lines.not_heard, "stt_failed")
            return
        finally:
            await utterance.stream.aclose()
        metrics.figures.stt_final_ms = (self.clock() - speech_end) * 1000
        metrics.figures.stt_engine_ms = utterance.engine_s * 1000
        if utterance.interrupted and len(text.split()) < max(1, self.config.barge_in_min_words):
            # noise, a cough, a word too few: the agent goes on where it was cut off
            self.false_interruptions += 1
            self._emit(WarningFrame("false_interruption", "That was not speech; the agent goes on."))
            self._say_again(utterance.resume)
            return
        if not text:
            return
        expect = utterance.expect
        if utterance.over_agent and not utterance.question_heard and expect and expect.answers(text):
            # "yes" over a question the caller had not heard yet answers nothing: ask it
            self._emit(
                WarningFrame("answer_before_question", "An answer came before its question; asking again.")
            )
            if utterance.interrupted or not self.agent_speaking:
                self._say_again(utterance.resume or self._question)
            return
        if utterance.over_agent and not utterance.interrupted and self.agent_speaking:
            self.interrupt()  # the caller answered while the agent finished: stop talking, answer
        await self._answer(text, metrics)

    def _say_again(self, texts: Sequence[str]) -> None:
        if texts and not self.agent_speaking:
            self.speak(texts)

    def push_text(self, text: str) -> None:
        """The caller's answer without speech (telephone keys): a turn, as if it had been said."""
        if self.ended or not text:
            return
        if self.agent_speaking:
            self.interrupt()
        self._last_activity = self.clock()
        self._spawn(self._answer(text, TurnTimings(self.clock())))

    async def _answer(self, text: str, metrics: TurnTimings) -> None:
        async with self._turn_lock:
            if self.ended:
                return
            generated: _Generated | None = None
            if isinstance(self.turns, StreamingTurnPort) and not self.muted:
                generated = _Generated()
                pending = asyncio.create_task(self.turns.stream_turn(text, generated.add))
                self._spawn(self._speak_generated(self.turn_index + 1, generated, metrics))
            else:
                pending = asyncio.create_task(self.turns.turn(text))
            self._generating = pending
            try:
                since = metrics.last_voiced if metrics.last_voiced is not None else metrics.speech_end
                await self._fill_while(pending, since, generated)
                reply = await pending
            except asyncio.CancelledError:
                if generated is not None:
                    generated.sentences.put_nowait(None)
                if not pending.cancelled():
                    raise
                return  # the caller interrupted the answer while it was generated: nothing to say
            except Exception as exc:
                if generated is not None:
                    generated.sentences.put_nowait(None)
                code = _code(exc)
                self._emit(ErrorFrame(code, _safe(exc, "The turn could not be run; say it again.")))
                if code == "session_ended":  # ended elsewhere (/end, the idle sweeper)
                    self.ended = True
                    self._emit(EndFrame(None, "session_ended"))
                    return
                await self._failed(self.lines.failure, "turn_failed")
                return
            finally:
                self._generating = None
                self._last_activity = self.clock()
            if generated is not None:  # the sentences spoken while generating, then the rest
                generated.sentences.put_nowait(None)
                await self._streamed_done(generated)
                reply = _rest(reply, generated)
                if generated.interrupted:
                    metrics.figures.interrupted = True
                    kept = [e for e in reply.result.events if e.type != "say"]
                    reply = replace(reply, result=replace(reply.result, events=kept))
            self._failures = 0
            self.turn_index += 1
            self._set_expect(reply.expect, reply.phrases)
            metrics.turn, metrics.metrics_index = self.turn_index, reply.metrics_index
            metrics.engine_ms = reply.result.engine_ms
            metrics.figures.llm_first_token_ms = reply.result.llm_first_token_ms
            speaking = self._start_speaking(self.turn_index, reply, metrics, question=True)
        try:
            await asyncio.shield(speaking)
        except asyncio.CancelledError:
            if not speaking.cancelled():
                raise
        self._last_activity = self.clock()
        self.timings.append(metrics)
        self._emit(MetricsFrame(metrics.turn, metrics.as_dict()))
        # The engine stages are counted by the runtime; the voice stages are this pipeline's.
        voice = metrics.voice()
        observe_turn(voice.model_dump(exclude={"interrupted", "llm_first_token_ms", "stt_engine_ms"}))
        if reply.ended:
            self.ended = True
            self._emit(EndFrame(reply.outcome, reply.reason))

    async def _speak_generated(self, turn: int, generated: _Generated, metrics: TurnTimings) -> None:
        """Speak an ``llm`` answer sentence by sentence while it is generated (after a filler)."""
        started = self.clock()
        try:
            await self._speak_sentences(turn, generated, metrics, started)
        finally:
            self._streaming = None
            generated.finished.set()

    async def _speak_sentences(
        self, turn: int, generated: _Generated, metrics: TurnTimings, started: float
    ) -> None:
        while (item := await generated.sentences.get()) is not None:
            node_id, sentence = item
            while self._speaking is not None and not self._speaking.done():
                await asyncio.wait({self._speaking})  # a filler finishes first
            if self.muted or self.ended:
                continue
            reply = TurnReply(TurnResult(events=[AgentEvent("say", node_id, sentence)]))
            self._says, self._starts = [sentence], []
            speaking = asyncio.create_task(self._speak(turn, reply, metrics, started))
            self._speaking, self._speaking_turn = speaking, turn
            self._streaming = speaking
            try:
                await asyncio.shield(speaking)
            except asyncio.CancelledError:
                if not speaking.cancelled():
                    raise
                generated.interrupted = True
                return  # interrupted: the sentences after it are not said

    async def _streamed_done(self, generated: _Generated) -> None:
        """Wait until every sentence spoken while generating has been handed out."""
        await generated.finished.wait()

    async def _fill_while(
        self, pending: asyncio.Task[TurnReply], since: float, generated: _Generated | None = None
    ) -> None:
        """Wait for the turn; once the caller has heard ``filler_after_ms`` of silence (counted from
        ``since``, their last voiced frame: the endpointing wait is silence too), say a filler line,
        and again after each further ``filler_after_ms`` of silence. A filler is spoken to its end
        before the answer begins: the answer's audio queues behind it, never over it."""
        if self.config.filler_after_ms <= 0:
            await asyncio.wait({pending})
            return
        wait = max(0.0, since + self.config.filler_after_ms / 1000 - self.clock())
        line = self.lines.filler
        while True:
            done, _ = await asyncio.wait({pending}, timeout=wait)
            if done:
                return
            if self.muted or self.ended or (generated is not None and generated.count):
                await asyncio.wait({pending})  # the answer is being spoken already
                return
            self.fillers += 1
            filler = self._start_speaking(self.turn_index, _says([line]), TurnTimings(self.clock()))
            await asyncio.wait({filler})
            line = self.lines.filler_again
            wait = max(0.0, self._playout_until - self.clock()) + self.config.filler_after_ms / 1000

    async def _failed(self, line: str, reason: str) -> None:
        """A failure the caller must hear about: say ``line``; after ``MAX_FAILURES`` in a row, say
        goodbye and end the call (outcome ``failed``, ``reason``)."""
        self._failures += 1
        if self._failures >= MAX_FAILURES:
            await self._hang_up(self.lines.goodbye_failure, "failed", reason)
            return
        if not self.muted and not self.ended:
            speaking = self._start_speaking(self.turn_index, _says([line]), TurnTimings(self.clock()))
            await asyncio.wait({speaking})

    async def _hang_up(self, line: str | None, outcome: str, reason: str) -> None:
        """The pipeline ends the call: say ``line``, then the end frame (the transport records it)."""
        if self.ended:
            return
        self.ended = True
        self.hangup = (outcome, reason)
        if line and not self.muted:
            speaking = self._start_speaking(self.turn_index, _says([line]), TurnTimings(self.clock()))
            await asyncio.wait({speaking})
        self._emit(EndFrame(outcome, reason))

    def _start_speaking(
        self, turn: int, reply: TurnReply, metrics: TurnTimings, *, question: bool = False
    ) -> asyncio.Task[None]:
        if self._speaking is not None and not self._speaking.done():
            self._speaking.cancel()  # one voice at a time
        says = [e.text for e in reply.result.events if e.type == "say" and e.text]
        self._says, self._starts = says, []
        if question and says:
            self._question = says[-1:]
        speaking = asyncio.create_task(self._speak(turn, reply, metrics))
        self._speaking, self._speaking_turn = speaking, turn
        return speaking

    async def _speak(
        self, turn: int, reply: TurnReply, metrics: TurnTimings, started: float | None = None
    ) -> None:
        started = self.clock() if started is None else started
        for event in reply.result.events:
            if event.type == "tool_call":
                self._emit(ToolCallFrame(event.data, event.node_id))
                continue
            if event.type != "say" or not event.text:
                continue
            self._emit(AgentText(event.text, turn, event.node_id))
            if self.muted:
                continue
            try:
                await self._synthesize(event.text, turn, metrics, started)
            except asyncio.CancelledError:
                metrics.figures.interrupted = True
                raise
            except Exception as exc:
                if self.fallback_tts is None or self.tts is self.fallback_tts:
                    self._emit(ErrorFrame(_code(exc), _safe(exc, "Speech synthesis failed.")))
                    # nothing can be said any more: end the call with a reason rather than dead air
                    self._spawn(self._hang_up(None, "failed", "tts_failed"))
                    return
                log.warning("tts_fallback", engine=getattr(self.tts, "name", "?"), error=type(exc).__name__)
                self._emit(WarningFrame("tts_fallback", "The voice failed; the offline voice takes over."))
                self.tts = self.fallback_tts
                try:
                    await self._synthesize(event.text, turn, metrics, started)
                except asyncio.CancelledError:
                    metrics.figures.interrupted = True
                    raise
                except Exception as again:
                    self._emit(ErrorFrame(_code(again), _safe(again, "Speech synthesis failed.")))
                    self._spawn(self._hang_up(None, "failed", "tts_failed"))
                    return
            self._emit(AgentSpoken(turn))

    async def _synthesize(self, text: str, turn: int, metrics: TurnTimings, started: float) -> None:
        frame_bytes = self.config.frame_bytes
        max_ahead = max(1, self.config.max_ahead_ms // self.config.frame_ms)
        pending = b""
        first = True
        voice = self.config.voice if self.tts is not self.fallback_tts else None
        chunks = self.tts.synthesize(
            text, voice=voice, language=self.config.language, sample_rate=self.config.sample_rate
        )
        self.usage.tts_requests += 1
        self.usage.tts_characters += len(text)
        try:
            async for chunk in chunks:
                pending += chunk
                while len(pending) >= frame_bytes:
                    frame, pending = pending[:frame_bytes], pending[frame_bytes:]
                    await self._send_audio(frame, turn, metrics, started, max_ahead, first)
                    first = False
            if pending:
                await self._send_audio(
                    pending.ljust(frame_bytes, b"\0"), turn, metrics, started, max_ahead, first
                )
        finally:
            await _aclose(chunks)

    async def _send_audio(
        self, frame: bytes, turn: int, metrics: TurnTimings, started: float, max_ahead: int, first: bool
    ) -> None:
        await self.out.wait_below(max_ahead)  # back-pressure: the transport reads at its pace
        now = self.clock()
        if metrics.figures.tts_first_byte_ms is None:
            metrics.figures.tts_first_byte_ms = (now - started) * 1000
            since = metrics.last_voiced if metrics.last_voiced is not None else metrics.speech_end
            metrics.figures.voice_to_voice_ms = (now - since) * 1000
        if first:  # this sentence begins to play once the audio before it has played
            self._starts.append(max(now, self._playout_until))
        self.out.put(AudioOut(frame, turn))
        self._playout_until = max(self._playout_until, now) + self.config.frame_ms / 1000

    # --- silence ------------------------------------------------------------------------------

    def start(self) -> None:
        """The line is open: from now on a silent caller is prompted again (``reprompt_after_ms``)."""
        if self.config.reprompt_after_ms > 0 and self._watcher is None:
            self._last_activity = self.clock()
            self._watcher = asyncio.create_task(self._watch_silence())

    def _busy(self) -> bool:
        return (
            self._utterance is not None
            or self.segmenter.in_speech
            or self._turn_lock.locked()
            or self.agent_speaking
            or any(not t.done() for t in self._tasks)
        )

    async def _watch_silence(self) -> None:
        wait = self.config.reprompt_after_ms / 1000
        while not self.ended and not self.muted:
            if self._busy():
                self._last_activity = self.clock()
                await asyncio.sleep(min(wait, 0.1))
                continue
            # measured from the end of the agent's audio (or the caller's last speech)
            due = max(self._last_activity, self._playout_until) + wait
            now = self.clock()
            if now < due:
                await asyncio.sleep(min(due - now, 0.25))
                continue
            self.reprompts += 1
            if self.reprompts > self.config.max_reprompts:
                await self._hang_up(self.lines.goodbye_silent, "abandoned", "caller_silent")
                return
            texts = [self.lines.reprompt, *self._question]
            question = self._question
            speaking = self._start_speaking(self.turn_index, _says(texts), TurnTimings(self.clock()))
            self._question = question
            await asyncio.wait({speaking})
            self._last_activity = self.clock()

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
        speaking = self._start_speaking(
            self.turn_index, _says(said), TurnTimings(self.clock()), question=True
        )
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
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if self._speaking is not None and not self._speaking.done():
            self._speaking.cancel()
        if self._utterance is not None:
            utterance, self._utterance = self._utterance, None
            if utterance.reader is not None:
                utterance.reader.cancel()
            await utterance.stream.aclose()


def _rest(reply: TurnReply, generated: _Generated) -> TurnReply:
    """``reply`` without what was spoken while it was generated."""
    events = []
    for event in reply.result.events:
        if event.type == "say" and event.text and event.node_id in generated.spoken:
            rest = generated.rest_of(event.node_id, event.text)
            if not rest:
                continue
            event = AgentEvent("say", event.node_id, rest, data=event.data)
        events.append(event)
    return replace(reply, result=replace(reply.result, events=events))


def _says(texts: Sequence[str]) -> TurnReply:
    """A reply that only speaks ``texts`` (greeting, filler, re-prompt, failure lines)."""
    return TurnReply(TurnResult(events=[AgentEvent("say", None, t) for t in texts]))


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
