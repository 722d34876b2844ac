"""The live call's behaviour in the pipeline: endpointing by the expected answer, barge-in that needs
real speech, spoken failures, fillers and re-prompts. Frames are counted, never timed."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from parley.kit.errors import ServiceUnavailable
from parley.runtime.engine import AgentEvent, TurnResult
from parley.voice.lines import SpokenLines
from parley.voice.pipeline.frames import (
    AgentSpoken,
    AgentText,
    AudioOut,
    EndFrame,
    ErrorFrame,
    Frame,
    Interrupt,
    MetricsFrame,
    SpeechEnded,
    ToolCallFrame,
    WarningFrame,
)
from parley.voice.pipeline.pipeline import Expect, PipelineConfig, TurnReply, VoicePipeline
from tests.voice.pipeline.fakes import SILENCE, SPEECH, FakeTurns, FrameTts, LoudnessVad, ScriptedStt, TextTts

BASE = PipelineConfig(
    start_ms=60,
    stop_ms=600,
    short_stop_ms=200,
    preroll_ms=100,
    max_ahead_ms=100,
    barge_in_min_ms=200,
    filler_after_ms=0,
    reprompt_after_ms=0,
    lines=SpokenLines.for_language("en"),
)
DIGITS = Expect(kind="digits", min_digits=2, max_digits=2)


def make(stt: Any, tts: Any, turns: Any, **config: Any) -> VoicePipeline:
    return VoicePipeline(stt=stt, tts=tts, vad=LoudnessVad(), turns=turns, config=replace(BASE, **config))


def drained(pipeline: VoicePipeline) -> list[Frame]:
    frames = []
    while (frame := pipeline.out.get_nowait()) is not None:
        frames.append(frame)
    return frames


async def collect_until(
    pipeline: VoicePipeline, kind: type[Frame], frames: list[Frame] | None = None
) -> list[Frame]:
    seen = frames if frames is not None else []
    while True:
        frame = await asyncio.wait_for(pipeline.out.get(), 10)
        seen.append(frame)
        if isinstance(frame, kind):
            return seen


async def silence_until_end(pipeline: VoicePipeline, limit: int = 100) -> int:
    """Push silent frames until the pipeline ends the caller's speech; answer how many it took."""
    for pushed in range(1, limit + 1):
        await pipeline.push_audio(SILENCE)
        if any(isinstance(f, SpeechEnded) for f in list(pipeline.out._items)):
            return pushed
    raise AssertionError("the speech never ended")


async def test_a_complete_answer_takes_the_turn_after_the_short_hangover() -> None:
    stt = ScriptedStt("four two", partial="four two")
    pipeline = make(stt, FrameTts(frames=2), FakeTurns(), expect=DIGITS)
    for _ in range(10):
        await pipeline.push_audio(SPEECH)
    await asyncio.sleep(0)  # the partial transcript reaches the pipeline
    assert await silence_until_end(pipeline) == 200 // 20
    frames = await collect_until(pipeline, MetricsFrame)
    metrics = frames[-1]
    assert isinstance(metrics, MetricsFrame)
    assert metrics.metrics["hangover_ms"] is not None
    assert metrics.metrics["voice_to_voice_ms"] >= metrics.metrics["hangover_ms"]


async def test_an_incomplete_answer_waits_the_normal_hangover() -> None:
    stt = ScriptedStt("four", partial="four")  # one digit of two
    pipeline = make(stt, FrameTts(frames=2), FakeTurns(), expect=DIGITS)
    for _ in range(10):
        await pipeline.push_audio(SPEECH)
    await asyncio.sleep(0)
    assert await silence_until_end(pipeline) == 600 // 20


async def test_a_collect_node_may_set_its_own_hangovers() -> None:
    stt = ScriptedStt("yes", partial="yes")
    expect = Expect(kind="yes_no", hangover_ms=400, short_hangover_ms=100)
    pipeline = make(stt, FrameTts(frames=2), FakeTurns(), expect=expect)
    for _ in range(10):
        await pipeline.push_audio(SPEECH)
    await asyncio.sleep(0)
    assert await silence_until_end(pipeline) == 100 // 20
    stt.partial = "well let me think"  # not an answer yet: the node's normal hangover
    await collect_until(pipeline, MetricsFrame)
    for _ in range(10):
        await pipeline.push_audio(SPEECH)
    await asyncio.sleep(0)
    drained(pipeline)
    pipeline._set_expect(expect, None)
    assert await silence_until_end(pipeline) == 400 // 20


async def speaking(pipeline: VoicePipeline, frames: int = 3) -> list[Frame]:
    """The caller's first turn, and the agent's long answer under way (``frames`` frames handed out)."""
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    seen: list[Frame] = []
    while sum(isinstance(f, AudioOut) for f in seen) < frames:
        seen.append(await asyncio.wait_for(pipeline.out.get(), 10))
    assert pipeline.agent_speaking
    return seen


async def test_a_short_noise_over_the_agent_does_not_interrupt_it() -> None:
    stt, tts = ScriptedStt("one", ""), FrameTts(frames=500)
    pipeline = make(stt, tts, FakeTurns())
    await speaking(pipeline)
    for frame in [SPEECH] * 5 + [SILENCE] * 30:  # 100 ms of noise: shorter than the 200 ms a barge-in needs
        await pipeline.push_audio(frame)
    frames: list[Frame] = []
    while not stt.streams[1].closed:  # the noise was recognised (as nothing)
        frames.append(await asyncio.wait_for(pipeline.out.get(), 10))
    frames += drained(pipeline)
    assert not any(isinstance(f, Interrupt) for f in frames) and pipeline.interruptions == 0
    assert pipeline.agent_speaking  # the agent goes on


async def test_a_false_interruption_lets_the_agent_say_its_sentence_again() -> None:
    stt, tts, turns = ScriptedStt("one", ""), FrameTts(frames=300), FakeTurns()
    pipeline = make(stt, tts, turns)
    await speaking(pipeline)
    pushed = 0
    while not any(isinstance(f, Interrupt) for f in list(pipeline.out._items)):
        await pipeline.push_audio(SPEECH)
        pushed += 1
        assert pushed < 20
    # the interruption came once the caller had spoken 200 ms (the start window counts)
    assert pushed == (200 - 60) // 20 + 3
    for _ in range(30):
        await pipeline.push_audio(SILENCE)
    frames = await collect_until(pipeline, AgentText)
    # the cough's transcript was empty: no turn, a warning, and the interrupted sentence again
    assert any(isinstance(f, WarningFrame) and f.code == "false_interruption" for f in frames)
    assert turns.texts == ["one"] and pipeline.false_interruptions == 1
    again = frames[-1]
    assert isinstance(again, AgentText) and again.text == "You said one."
    assert tts.texts == ["You said one.", "You said one."]


class TwoSentences(FakeTurns):
    """A status sentence, then a yes/no question."""

    async def turn(self, text: str) -> TurnReply:
        self.texts.append(text)
        events = [
            AgentEvent("say", "status", "Your car is ready."),
            AgentEvent("say", "ask", "Would you like a call back?"),
        ]
        return TurnReply(
            TurnResult(events=events), expect=Expect(kind="yes_no"), metrics_index=len(self.texts)
        )


async def test_a_yes_before_the_question_was_heard_does_not_answer_it() -> None:
    stt, tts, turns = ScriptedStt("one two", "yes"), FrameTts(frames=300), TwoSentences()
    pipeline = make(stt, tts, turns)
    await speaking(pipeline)  # the first sentence plays; the question is 300 frames away
    frames: list[Frame] = []
    for frame in [SPEECH] * 15 + [SILENCE] * 35:  # "yes", long enough to interrupt
        await pipeline.push_audio(frame)
    await collect_until(pipeline, WarningFrame, frames)
    warning = frames[-1]
    assert isinstance(warning, WarningFrame) and warning.code == "answer_before_question"
    assert turns.texts == ["one two"]  # the "yes" was no turn
    await collect_until(pipeline, AgentText, frames)
    # the agent goes on from the sentence it was cut off in (the question follows it)
    assert [f.text for f in frames if isinstance(f, AgentText)] == ["Your car is ready."]


async def test_a_yes_after_the_question_began_is_the_answer() -> None:
    stt, tts, turns = ScriptedStt("one two", "yes"), FrameTts(frames=3), TwoSentences()
    pipeline = make(stt, tts, turns)
    await speaking(pipeline, frames=6)  # both sentences have been handed out
    frames = await collect_until(pipeline, MetricsFrame)
    assert any(isinstance(f, AgentSpoken) for f in frames)

    async def played() -> None:
        while pipeline.agent_speaking:  # the question has played out
            await asyncio.sleep(0.01)

    await asyncio.wait_for(played(), 10)
    for frame in [SPEECH] * 15 + [SILENCE] * 35:
        await pipeline.push_audio(frame)
    await collect_until(pipeline, MetricsFrame)
    assert turns.texts == ["one two", "yes"]


class SlowTurns(FakeTurns):
    """The turn waits until the test lets it go (a slow tool or LLM)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def turn(self, text: str) -> TurnReply:
        await self.release.wait()
        return await super().turn(text)


async def test_a_slow_turn_gets_a_filler_that_the_answer_never_overlaps() -> None:
    stt, tts, turns = ScriptedStt("one"), TextTts(frames=5), SlowTurns()
    pipeline = make(stt, tts, turns, filler_after_ms=10)
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, AgentSpoken)
    texts = [f.text for f in frames if isinstance(f, AgentText)]
    assert texts == ["One moment please, let me check."]
    turns.release.set()  # the answer arrives while the filler may still play
    frames += await collect_until(pipeline, MetricsFrame)
    texts = [f.text for f in frames if isinstance(f, AgentText)]
    assert texts[0] == "One moment please, let me check." and texts[-1] == "You said one."
    # the audio, in order: every frame of each line before the next line begins
    voices = [f.pcm[:2] for f in frames if isinstance(f, AudioOut)]
    runs = [v for i, v in enumerate(voices) if i == 0 or voices[i - 1] != v]
    assert runs == sorted(runs, key=lambda v: int.from_bytes(v, "little")) and len(runs) == len(set(runs))
    assert voices.count(runs[-1]) == 5  # the answer, whole
    assert pipeline.fillers >= 1


class FailingTurns(FakeTurns):
    async def turn(self, text: str) -> TurnReply:
        self.texts.append(text)
        raise ServiceUnavailable("The database is not reachable.")


async def test_a_failed_turn_is_spoken_and_three_in_a_row_end_the_call_politely() -> None:
    stt, tts, turns = ScriptedStt("one", "two", "three"), FrameTts(frames=2), FailingTurns()
    pipeline = make(stt, tts, turns)
    frames: list[Frame] = []
    for _attempt in range(2):
        for frame in [SPEECH] * 10 + [SILENCE] * 30:
            await pipeline.push_audio(frame)
        await collect_until(pipeline, AgentSpoken, frames)
    errors = [f for f in frames if isinstance(f, ErrorFrame)]
    assert [e.code for e in errors] == ["service_unavailable"] * 2
    said = [f.text for f in frames if isinstance(f, AgentText)]
    assert said == [SpokenLines.for_language("en").failure] * 2
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    await collect_until(pipeline, EndFrame, frames)
    end = frames[-1]
    assert isinstance(end, EndFrame) and (end.outcome, end.reason) == ("failed", "turn_failed")
    assert [f.text for f in frames if isinstance(f, AgentText)][-1].startswith("I am sorry")
    assert pipeline.hangup == ("failed", "turn_failed") and pipeline.ended


async def test_a_flow_fallback_line_is_spoken_in_its_language() -> None:
    lines = SpokenLines.for_language("de", "Das ging leider schief.")
    pipeline = make(ScriptedStt("eins"), FrameTts(frames=2), FailingTurns(), lines=lines)
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, AgentSpoken)
    assert [f.text for f in frames if isinstance(f, AgentText)] == ["Das ging leider schief."]
    assert SpokenLines.for_language("de").filler == "Einen Moment bitte, ich sehe nach."


async def test_a_recognizer_failure_is_spoken() -> None:
    pipeline = make(ScriptedStt(fail=True), FrameTts(frames=2), FakeTurns())
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, AgentSpoken)
    assert any(isinstance(f, ErrorFrame) and f.code == "stt_unavailable" for f in frames)
    assert [f.text for f in frames if isinstance(f, AgentText)] == [SpokenLines.for_language("en").not_heard]
    assert sum(isinstance(f, AudioOut) for f in frames) == 2


async def test_a_failing_voice_falls_back_to_the_offline_one() -> None:
    vendor, offline = FrameTts(frames=3, fail=True), FrameTts(frames=4)
    pipeline = VoicePipeline(
        stt=ScriptedStt("one"),
        tts=vendor,
        vad=LoudnessVad(),
        turns=FakeTurns(),
        config=BASE,
        fallback_tts=offline,
    )
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, MetricsFrame)
    assert any(isinstance(f, WarningFrame) and f.code == "tts_fallback" for f in frames)
    assert sum(isinstance(f, AudioOut) for f in frames) == 4 and offline.texts == ["You said one."]


async def test_without_any_voice_the_call_ends_with_a_reason() -> None:
    pipeline = make(ScriptedStt("one"), FrameTts(fail=True), FakeTurns())
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, EndFrame)
    end = frames[-1]
    assert isinstance(end, EndFrame) and (end.outcome, end.reason) == ("failed", "tts_failed")


async def test_a_silent_caller_is_prompted_again_then_told_goodbye() -> None:
    pipeline = make(ScriptedStt(), FrameTts(frames=2), FakeTurns(), reprompt_after_ms=30, max_reprompts=2)
    pipeline.speak(["Say your number."])
    pipeline.start()
    frames = await collect_until(pipeline, EndFrame)
    said = [f.text for f in frames if isinstance(f, AgentText)]
    lines = SpokenLines.for_language("en")
    assert said == [
        "Say your number.",
        lines.reprompt,
        "Say your number.",
        lines.reprompt,
        "Say your number.",
        lines.goodbye_silent,
    ]
    end = frames[-1]
    assert isinstance(end, EndFrame) and (end.outcome, end.reason) == ("abandoned", "caller_silent")
    # every prompt begins after the audio before it was handed out (never over it)
    kinds = [type(f) for f in frames]
    assert kinds.count(AgentSpoken) == 6
    await pipeline.aclose()


async def test_the_caller_speaking_resets_the_re_prompts() -> None:
    turns = FakeTurns()
    pipeline = make(ScriptedStt("one"), FrameTts(frames=2), turns, reprompt_after_ms=30, max_reprompts=1)
    pipeline.speak(["Say your number."])
    pipeline.start()
    frames = await collect_until(pipeline, AgentText)
    frames = await collect_until(pipeline, AgentText)  # the first re-prompt
    assert frames[-1].text == SpokenLines.for_language("en").reprompt  # type: ignore[attr-defined]
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, MetricsFrame)
    assert turns.texts == ["one"] and pipeline.reprompts == 0
    await pipeline.aclose()


class StreamingTurns(FakeTurns):
    """An ``llm`` answer generated piece by piece; the rest waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.cancelled = False

    async def stream_turn(self, text: str, on_text: Any) -> TurnReply:
        self.texts.append(text)
        try:
            await on_text("llm", "Your car ")
            await on_text("llm", "is ready. It costs")
            await self.release.wait()
            await on_text("llm", " forty euros.")
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        events = [
            AgentEvent("tool_call", "llm", data={"tool": "order_lookup", "status": "ok"}),
            AgentEvent("say", "llm", "Your car is ready. It costs forty euros."),
        ]
        return TurnReply(TurnResult(events=events, llm_first_token_ms=5.0), metrics_index=len(self.texts))


async def test_an_llm_answer_is_spoken_sentence_by_sentence_while_it_is_generated() -> None:
    stt, tts, turns = ScriptedStt("where is my car"), FrameTts(frames=3), StreamingTurns()
    pipeline = make(stt, tts, turns)
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, AgentSpoken)
    # the first sentence is heard while the answer is still being generated
    assert [f.text for f in frames if isinstance(f, AgentText)] == ["Your car is ready."]
    assert sum(isinstance(f, AudioOut) for f in frames) == 3 and not turns.release.is_set()
    turns.release.set()
    frames += await collect_until(pipeline, MetricsFrame)
    assert [f.text for f in frames if isinstance(f, AgentText)] == [
        "Your car is ready.",
        "It costs forty euros.",
    ]
    assert tts.texts == ["Your car is ready.", "It costs forty euros."]  # nothing said twice
    assert any(isinstance(f, ToolCallFrame) for f in frames)  # the LLM turn's tool call still reported
    metrics = frames[-1]
    assert isinstance(metrics, MetricsFrame) and metrics.metrics["voice_to_voice_ms"] is not None


async def test_an_interruption_cancels_the_generation() -> None:
    stt, tts, turns = ScriptedStt("where is my car", "stop"), FrameTts(frames=300), StreamingTurns()
    pipeline = make(stt, tts, turns)
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    seen: list[Frame] = []
    while sum(isinstance(f, AudioOut) for f in seen) < 3:
        seen.append(await asyncio.wait_for(pipeline.out.get(), 10))
    for frame in [SPEECH] * 15:  # the caller speaks over the first sentence
        await pipeline.push_audio(frame)
    await collect_until(pipeline, Interrupt)

    async def cancelled() -> None:
        while not turns.cancelled:
            await asyncio.sleep(0)

    await asyncio.wait_for(cancelled(), 10)
    assert not turns.release.is_set()


async def test_an_interrupted_streamed_answer_does_not_go_on_after_the_turn_finished() -> None:
    stt, tts, turns = ScriptedStt("where is my car", "stop"), FrameTts(frames=300), StreamingTurns()
    turns.release.set()  # the whole answer is generated while its first sentence plays
    pipeline = make(stt, tts, turns)
    for frame in [SPEECH] * 10 + [SILENCE] * 30:
        await pipeline.push_audio(frame)
    seen: list[Frame] = []
    while sum(isinstance(f, AudioOut) for f in seen) < 3:
        seen.append(await asyncio.wait_for(pipeline.out.get(), 10))
    for frame in [SPEECH] * 15:
        await pipeline.push_audio(frame)
    seen += await collect_until(pipeline, Interrupt)
    seen += await collect_until(pipeline, MetricsFrame)
    assert [f.text for f in seen if isinstance(f, AgentText)] == ["Your car is ready."]
    metrics = seen[-1]
    assert isinstance(metrics, MetricsFrame) and metrics.metrics["interrupted"] is True
