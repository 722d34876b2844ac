"""Voice mode: the caller's scripted lines spoken by the offline voice (eSpeak NG), streamed in 20 ms
frames through the real voice pipeline a live call uses (:class:`VoicePipeline`: VAD endpointing with
the flow's turn-taking settings and the collect node's expectations, streaming recognition, barge-in,
the flow engine, streaming synthesis), over in-memory state as in text mode. The agent's audio is
paced out as a live transport paces it (:class:`parley.voice.session_call.Playout`).

**Pace.** ``realtime``: the caller's frames go in at the rate they are spoken and the agent's audio
comes out at the rate it is heard, so a run lasts as long as its calls and every figure is what a
caller experiences. ``fast`` (the default): the same frames and the same turn-taking on a call clock
(:class:`CallClock`) that counts every caller frame as 20 ms but does not wait for it, except the
silence while the endpointing decides (the recognizer's partial transcripts arrive at their real
speed); the work of recognition, the turn and synthesis is counted at its real duration. Fast runs
skip the dead time (the caller's speech, the agent talking) and keep the order of events and the
latency.

**Turn-taking.** The caller speaks after the agent's reply has played (and a short pause), or, for a
turn with ``barge_in``, ``after_ms`` after the reply began: over the agent. A turn with ``noise_ms``
is a noise burst (a cough) instead of words. A silent turn streams one second of silence and gives
the engine an empty answer (the live pipeline's re-prompt does the same on a call).

Each turn adds what the pipeline heard, the recognition accuracy (the caller's words heard as said,
1 − word error rate), the pipeline's latency figures (``voice_to_voice_ms``: the caller's last voiced
frame → the agent's first audio, and its parts) and, when the caller spoke over the agent, the
barge-in figures (``agent_interrupted``, ``stopped_ms``, ``false_interruption``, ``agent_continued``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from parley.evaluations.expectations import Conversation
from parley.evaluations.schemas import CallerTurn, Scenario
from parley.flows.definition import FlowDefinition
from parley.runtime.engine import FlowEngine, TurnResult
from parley.voice.engines.base import SttEngine, TtsEngine, Vad
from parley.voice.pipeline.frames import AudioOut, ErrorFrame, Interrupt, WarningFrame
from parley.voice.pipeline.pipeline import TurnReply, VoicePipeline
from parley.voice.session_call import (
    FRAME_BYTES,
    FRAME_MS,
    SAMPLE_RATE,
    Playout,
    expect_of,
    phrases_for,
    pipeline_config,
)

Pace = Literal["fast", "realtime"]
SILENT_TURN_FRAMES = 50  # 1 s: more than the endpointing's 600 ms
PAUSE_FRAMES = 15  # the caller's pause after the agent's reply before answering (300 ms)
ENDPOINT_WAIT_S = 5.0  # call-clock seconds of silence the endpointing may take to close an utterance
ANSWER_WAIT_S = 30.0  # call-clock seconds for a turn's recognition, engine and spoken answer
CALLER_VOICES = {"de": "de", "en": "en-us"}
_WORD = re.compile(r"\w+")
SILENCE = b"\0" * FRAME_BYTES

Recorder = Callable[[Conversation, int, str | None, TurnResult], None]


class VoiceFailure(Exception):
    """The pipeline could not hear or answer (no recognition model, an engine error); safe to show."""


def word_accuracy(said: str, heard: str) -> float:
    """1 − word error rate of ``heard`` against ``said`` (at least 0), case-insensitive."""
    expected = _WORD.findall(said.casefold())
    got = _WORD.findall(heard.casefold())
    if not expected:
        return 1.0 if not got else 0.0
    previous = list(range(len(got) + 1))
    for i, word in enumerate(expected, start=1):
        current = [i]
        for j, other in enumerate(got, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other)))
        previous = current
    return round(max(0.0, 1.0 - previous[-1] / len(expected)), 3)


class CallClock:
    """The clock of one voiced scenario. ``realtime``: the wall clock, and every caller frame waits its
    20 ms. ``fast``: the wall clock plus the audio time skipped: a caller frame moves it on by at least
    20 ms without waiting, so the pipeline sees a call's timeline and real processing times."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.skew = 0.0
        self.frames = 0
        self.started = time.perf_counter()
        self.last = self.started

    def __call__(self) -> float:
        return time.perf_counter() + self.skew

    async def tick(self, *, paced: bool = False) -> None:
        """One caller frame is due; ``paced``: at the fast pace too, it waits its 20 ms."""
        self.frames += 1
        if self.pace == "realtime":
            due = self.started + self.frames * FRAME_MS / 1000
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            return
        if paced and (delay := self.last + FRAME_MS / 1000 - self()) > 0:
            await asyncio.sleep(delay)
        now = self()
        if now < self.last + FRAME_MS / 1000:
            self.skew += self.last + FRAME_MS / 1000 - now
        self.last = self()


@dataclass
class VoiceTurn:
    said: str
    heard: str = ""
    noise_ms: int | None = None
    timings: dict[str, float | None] | None = None
    # the pipeline's number for the turn this caller turn's answer got (its timings carry it)
    answered_as: int | None = None
    barge_in: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "said": self.said,
            "heard": self.heard,
            "recognition_accuracy": word_accuracy(self.said, self.heard) if self.said else None,
            "voice_to_voice_ms": None,
            **(self.timings or {}),
        }
        if self.noise_ms is not None:
            data["noise_ms"] = self.noise_ms
        if self.barge_in is not None:
            data["barge_in"] = self.barge_in
        if self.warnings:
            data["warnings"] = self.warnings
        return data


class _EngineTurns:
    """The pipeline's turn port over the in-memory conversation."""

    def __init__(self, engine: FlowEngine, definition: FlowDefinition, conversation: Conversation) -> None:
        self.engine, self.definition, self.conversation = engine, definition, conversation
        self.last: TurnResult | None = None
        self.heard = ""
        self.answered = 0  # turns the engine answered
        self.pipeline: VoicePipeline | None = None
        self.numbers: list[int] = []  # the pipeline's turn number of each answer

    def language(self) -> str:
        return str(self.conversation.state.variables.get("language") or self.definition.language)

    async def turn(self, text: str) -> TurnReply:
        state = self.conversation.state
        self.heard = text
        self.last = await self.engine.handle(state, text)
        self.answered += 1
        if self.pipeline is not None:  # the turn lock is held: the pipeline numbers this turn next
            self.numbers.append(self.pipeline.turn_index + 1)
        language = self.language()
        return TurnReply(
            self.last,
            ended=state.status != "active",
            outcome=state.outcome,
            reason=state.end_reason,
            phrases=_phrases(self.definition, state.current_node, language),
            expect=expect_of(self.definition, state.current_node, language),
        )


def _phrases(definition: FlowDefinition, node: str | None, language: str) -> list[str] | None:
    return phrases_for(definition, node, language)


@dataclass
class _Heard:
    """What the agent's side put on the wire, in order, with the call clock: ``audio``,
    ``interrupt`` and warning codes."""

    events: list[tuple[float, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def since(self, start: int, end: int | None = None) -> list[tuple[float, str]]:
        return self.events[start:end]


async def _speak(tts: TtsEngine, text: str, language: str) -> list[bytes]:
    voice = CALLER_VOICES.get(language[:2], language)
    audio = b"".join(
        [c async for c in tts.synthesize(text, voice=voice, language=language, sample_rate=SAMPLE_RATE)]
    )
    return _frames(audio)


def _frames(audio: bytes) -> list[bytes]:
    audio += b"\0" * (-len(audio) % FRAME_BYTES)
    return [audio[i : i + FRAME_BYTES] for i in range(0, len(audio), FRAME_BYTES)]


def noise_burst(ms: int) -> list[bytes]:
    """A cough: a loud burst of noise with a fast attack and a decay, the same every time."""
    count = SAMPLE_RATE * ms // 1000
    rng = random.Random(ms)
    samples = bytearray()
    for i in range(count):
        envelope = min(1.0, i / (count * 0.1 + 1)) * math.exp(-3.0 * i / count)
        value = int(rng.uniform(-1.0, 1.0) * 20000 * envelope)
        samples += value.to_bytes(2, "little", signed=True)
    return _frames(bytes(samples))


class _Caller:
    """The caller's side of one voiced scenario: frames into the pipeline, the agent's frames out."""

    def __init__(self, pipeline: VoicePipeline, clock: CallClock) -> None:
        self.pipeline, self.clock = pipeline, clock
        self.heard = _Heard()
        self.first_audio: dict[int, float] = {}  # per agent turn: when its first audio went out
        self.onset: float | None = None  # the caller's first voiced frame of the current turn

    async def listen(self) -> None:
        """The transport's side: the agent's audio paced as a live call's, every event noted."""
        playout = Playout(self.clock) if self.clock.pace == "realtime" else None
        while True:
            frame = await self.pipeline.out.get()
            if isinstance(frame, AudioOut):
                if playout is not None:
                    await playout.wait()
                    playout.sent()
                self.first_audio.setdefault(frame.turn, self.clock())
                self.heard.events.append((self.clock(), "audio"))
            elif isinstance(frame, Interrupt):
                if playout is not None:
                    playout.reset()
                self.heard.events.append((self.clock(), "interrupt"))
            elif isinstance(frame, WarningFrame):
                self.heard.events.append((self.clock(), frame.code))
            elif isinstance(frame, ErrorFrame):
                self.heard.problems.append(frame.detail)

    async def feed(self, frames: list[bytes], *, paced: bool = False) -> None:
        for frame in frames:
            await self.clock.tick(paced=paced)
            await self.pipeline.push_audio(frame)
            if self.onset is None and self.pipeline.segmenter.voiced:
                self.onset = self.clock()
            await asyncio.sleep(0)  # recognition and the answer run beside the audio
            if self.heard.problems:
                raise VoiceFailure(self.heard.problems[0])

    async def reply_began(self, turn: int) -> float | None:
        """When the agent's reply numbered ``turn`` began to go out (None: nothing is said)."""
        pipeline = self.pipeline
        await self.until(lambda: turn in self.first_audio or not pipeline.busy, ANSWER_WAIT_S)
        return self.first_audio.get(turn)

    async def until(self, ready: Callable[[], bool], limit_s: float) -> bool:
        """Stream silence until ``ready``; at the fast pace, work in progress is waited for at its real
        duration (only audio time is skipped)."""
        start = self.clock()
        while not ready():
            if self.clock() - start > limit_s:
                return False
            pipeline = self.pipeline
            if self.clock.pace == "fast" and pipeline.working and not pipeline.listening:
                await asyncio.sleep(0.005)  # a turn or synthesis in progress: its real duration
                if self.heard.problems:
                    raise VoiceFailure(self.heard.problems[0])
                continue
            # The endpointing wait is silence on the wall clock at either pace: the recognizer's
            # partial transcripts (which close a complete answer early) arrive at their real speed.
            await self.feed([SILENCE], paced=pipeline.listening)
        return True


def _barge_figures(turn: VoiceTurn, events: list[tuple[float, str]], onset: float | None) -> dict[str, Any]:
    stops = [at for at, kind in events if kind == "interrupt"]
    interrupted = bool(stops)
    after = [kind for at, kind in events if kind == "audio" and interrupted and at >= stops[0]]
    stopped_ms = round((stops[0] - onset) * 1000, 1) if interrupted and onset is not None else None
    false = any(kind == "false_interruption" for _, kind in events)
    return {
        "agent_interrupted": interrupted,
        "stopped_ms": max(0.0, stopped_ms) if stopped_ms is not None else None,
        "false_interruption": false,
        "agent_continued": not interrupted or bool(after),
    }


async def voice_turns(
    engine: FlowEngine,
    definition: FlowDefinition,
    scenario: Scenario,
    conversation: Conversation,
    *,
    stt: SttEngine,
    caller_tts: TtsEngine,
    agent_tts: TtsEngine,
    vad: Vad,
    record: Recorder,
    pace: Pace = "fast",
) -> list[VoiceTurn]:
    """Play the scripted turns through a pipeline, recording each turn as text mode does."""
    state = conversation.state
    port = _EngineTurns(engine, definition, conversation)
    language = port.language()
    clock = CallClock(pace)
    config = pipeline_config(definition, state, language[:2], None)
    pipeline = VoicePipeline(stt=stt, tts=agent_tts, vad=vad, turns=port, config=config, clock=clock)
    port.pipeline = pipeline
    caller = _Caller(pipeline, clock)
    listener = asyncio.create_task(caller.listen())
    figures: list[VoiceTurn] = []
    windows: list[tuple[int, float | None]] = []  # per turn: where its events begin, its onset
    try:
        pipeline.speak(state.opening_lines())  # the greeting, as on a live call
        for number, turn in enumerate(scenario.turns, start=1):
            if state.status != "active":
                conversation.unused_turns = len(scenario.turns) - number + 1
                break
            await _wait_for_turn(caller, turn, port.numbers[-1] if port.numbers else 0)
            windows.append((len(caller.heard.events), None))
            caller.onset = None
            if turn.silence:
                await caller.feed([SILENCE] * SILENT_TURN_FRAMES)
                await caller.until(lambda: not pipeline.working, ANSWER_WAIT_S)
                result = await engine.handle(state, "")
                record(conversation, number, "", result)
                pipeline.expecting(
                    expect_of(definition, state.current_node, language),
                    _phrases(definition, state.current_node, language),
                )
                pipeline.speak([e.text for e in result.events if e.type == "say" and e.text])
                figures.append(VoiceTurn(""))
                continue
            port.last, port.heard = None, ""
            answered = port.answered
            frames = (
                noise_burst(turn.noise_ms) if turn.noise_ms else await _speak(caller_tts, turn.text, language)
            )
            await caller.feed(frames)
            # the caller is quiet: the endpointing closes the utterance, the engine answers (or not)
            await caller.until(lambda: not pipeline.listening, ENDPOINT_WAIT_S)
            await caller.until(_answered(port, pipeline, answered), ANSWER_WAIT_S)
            windows[-1] = (windows[-1][0], caller.onset)
            figure = VoiceTurn(turn.text, port.heard, noise_ms=turn.noise_ms)
            if port.answered > answered and port.last is not None:
                figure.answered_as = port.numbers[-1] if port.numbers else None
                record(conversation, number, port.heard, port.last)
            else:  # nothing recognised: the agent heard no answer
                record(conversation, number, "", TurnResult())
            figures.append(figure)
        # the last reply is heard to its end
        await caller.until(lambda: not pipeline.busy, ANSWER_WAIT_S)
        if caller.heard.problems:
            raise VoiceFailure(caller.heard.problems[0])
    finally:
        await pipeline.aclose()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pipeline.drain(), 5.0)
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    timings = {t.turn: t for t in pipeline.timings}
    for index, (figure, turn) in enumerate(zip(figures, scenario.turns, strict=False)):
        if figure.answered_as is not None and figure.answered_as in timings:
            figure.timings = timings[figure.answered_as].as_dict()
        start, onset = windows[index]
        end = windows[index + 1][0] if index + 1 < len(windows) else None
        events = caller.heard.since(start, end)
        figure.warnings = [kind for _, kind in events if kind not in ("audio", "interrupt")]
        if turn.barge_in is not None or any(kind == "interrupt" for _, kind in events):
            figure.barge_in = {
                "after_ms": turn.barge_in.after_ms if turn.barge_in else None,
                **_barge_figures(figure, events, onset),
            }
    return figures


def _answered(port: _EngineTurns, pipeline: VoicePipeline, before: int) -> Callable[[], bool]:
    """The engine answered a turn since ``before``, or nothing is being worked on (nothing heard)."""
    return lambda: port.answered > before or not pipeline.working


async def _wait_for_turn(caller: _Caller, turn: CallerTurn, reply: int) -> None:
    """Before the caller's turn: the agent's reply has played and a pause passed, or (barge-in) the
    reply began ``after_ms`` ago."""
    pipeline = caller.pipeline
    if turn.barge_in is None:
        await caller.until(lambda: not pipeline.busy, ANSWER_WAIT_S)
        await caller.feed([SILENCE] * PAUSE_FRAMES)
        return
    started = await caller.reply_began(reply)
    if started is None:  # nothing is being said: the caller speaks now
        return
    wait = turn.barge_in.after_ms / 1000
    await caller.until(lambda: caller.clock() >= started + wait, wait + 1.0)


def check_voice(scenario: Scenario, conversation: Conversation) -> list[dict[str, Any]]:
    """Every failed voice expectation of the scenario's turns, as ``check`` answers them."""
    failures: list[dict[str, Any]] = []
    for record in conversation.turns[1:]:
        if record.index > len(scenario.turns):
            break
        checks = scenario.turns[record.index - 1].voice
        if checks is None:
            continue
        figures = record.voice or {}
        barge = figures.get("barge_in") or {}

        def fail(expectation: str, expected: Any, actual: Any, turn: int = record.index) -> None:
            failures.append(
                {
                    "expectation": f"voice, turn {turn}: {expectation}",
                    "expected": expected,
                    "actual": actual,
                    "turn": turn,
                }
            )

        interrupted = bool(barge.get("agent_interrupted"))
        if checks.agent_interrupted is not None and interrupted != checks.agent_interrupted:
            fail("agent_interrupted", checks.agent_interrupted, interrupted)
        if checks.stopped_within_ms is not None:
            stopped = barge.get("stopped_ms")
            if stopped is None or stopped > checks.stopped_within_ms:
                fail("the agent stopped within", f"{checks.stopped_within_ms} ms", stopped)
        if checks.min_accuracy is not None:
            accuracy = figures.get("recognition_accuracy")
            if accuracy is None or accuracy < checks.min_accuracy:
                fail("the caller's words heard as said", f">= {checks.min_accuracy}", figures.get("heard"))
        if checks.agent_continued is not None:
            continued = bool(barge.get("agent_continued", True))
            if continued != checks.agent_continued:
                fail("agent_continued", checks.agent_continued, continued)
    return failures
