from __future__ import annotations

import asyncio
from typing import Any

from parley.voice.pipeline.frames import (
    AgentSpoken,
    AgentText,
    AudioOut,
    ControlFrame,
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
from parley.voice.pipeline.pipeline import PipelineConfig, VoicePipeline
from tests.voice.pipeline.fakes import SILENCE, SPEECH, FakeTurns, FrameTts, LoudnessVad, ScriptedStt

CONFIG = PipelineConfig(
    start_ms=60, stop_ms=100, preroll_ms=100, max_ahead_ms=100, phrases=["one", "two"], barge_in_min_ms=60
)


def make(stt: ScriptedStt, tts: FrameTts, turns: FakeTurns) -> VoicePipeline:
    return VoicePipeline(stt=stt, tts=tts, vad=LoudnessVad(), turns=turns, config=CONFIG)


async def say(pipeline: VoicePipeline, voiced: int = 10, silence: int = 6) -> None:
    for frame in [SPEECH] * voiced + [SILENCE] * silence:
        await pipeline.push_audio(frame)


async def collect_until(pipeline: VoicePipeline, kind: type[Frame]) -> list[Frame]:
    frames: list[Frame] = []
    while True:
        frame = await asyncio.wait_for(pipeline.out.get(), 5)
        frames.append(frame)
        if isinstance(frame, kind):
            return frames


async def test_an_utterance_becomes_a_turn_with_audio_text_and_metrics() -> None:
    stt, tts, turns = ScriptedStt("one two"), FrameTts(frames=7), FakeTurns(tool=True)
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    frames = await collect_until(pipeline, MetricsFrame)

    kinds = [type(f) for f in frames]
    assert kinds[0] is SpeechStarted
    assert SpeechEnded in kinds
    transcripts = [f for f in frames if isinstance(f, TranscriptFrame)]
    assert [(t.text, t.final) for t in transcripts] == [("…", False), ("one two", True)]
    assert turns.texts == ["one two"]
    assert stt.phrases == [["one", "two"]]
    tool = next(f for f in frames if isinstance(f, ToolCallFrame))
    assert tool.data["tool"] == "lookup"
    text = next(f for f in frames if isinstance(f, AgentText))
    assert text.text == "You said one two." and text.turn == 1
    audio = [f for f in frames if isinstance(f, AudioOut)]
    assert len(audio) == 7 and all(len(f.pcm) == 640 for f in audio)
    # the agent's text comes before its audio, the metrics after the last frame
    assert kinds.index(AgentText) < kinds.index(AudioOut)
    metrics = frames[-1]
    assert isinstance(metrics, MetricsFrame) and metrics.turn == 1
    assert metrics.metrics["engine_ms"] == 1.5 and metrics.metrics["llm_first_token_ms"] == 12.0
    for key in ("stt_final_ms", "tts_first_byte_ms", "voice_to_voice_ms"):
        value = metrics.metrics[key]
        assert value is not None and value >= 0
    assert metrics.metrics["voice_to_voice_ms"] >= metrics.metrics["stt_final_ms"]  # type: ignore[operator]
    assert stt.streams[0].closed and tts.closed == 1


async def test_silence_and_noise_bursts_shorter_than_the_start_window_do_not_make_turns() -> None:
    stt, tts, turns = ScriptedStt("never"), FrameTts(), FakeTurns()
    pipeline = make(stt, tts, turns)
    for _ in range(20):
        await pipeline.push_audio(SILENCE)
    await say(pipeline, voiced=2, silence=10)  # 40 ms of "speech" < the 60 ms start window
    await pipeline.drain()
    assert stt.streams == [] and turns.texts == [] and len(pipeline.out) == 0


async def test_caller_speech_over_the_agent_cancels_synthesis_and_clears_the_transport() -> None:
    stt, tts, turns = ScriptedStt("one two", "stop"), FrameTts(frames=500), FakeTurns()
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    seen: list[Frame] = []
    while sum(isinstance(f, AudioOut) for f in seen) < 3:
        seen.append(await asyncio.wait_for(pipeline.out.get(), 5))
    assert pipeline.agent_speaking

    # The caller starts talking: count the caller frames until the interruption is signalled.
    pushed = 0
    after: list[Frame] = []
    while not any(isinstance(f, Interrupt) for f in after):
        await pipeline.push_audio(SPEECH)
        pushed += 1
        while (frame := pipeline.out.get_nowait()) is not None:
            after.append(frame)
        assert pushed <= 5  # 100 ms of caller audio at most
    speech_started = next(i for i, f in enumerate(after) if isinstance(f, SpeechStarted))
    interrupt_at = next(i for i, f in enumerate(after) if isinstance(f, Interrupt))
    # the interruption follows the VAD's decision in the same step: no agent frame in between
    assert interrupt_at == speech_started + 1
    assert pushed == CONFIG.start_ms // CONFIG.frame_ms

    # Let the event loop run: the cancelled synthesis produces no further agent audio.
    produced = tts.produced
    for _ in range(50):
        await asyncio.sleep(0)
    while (frame := pipeline.out.get_nowait()) is not None:
        after.append(frame)
    assert not any(isinstance(f, AudioOut) and f.turn == 1 for f in after[interrupt_at:])
    assert tts.produced <= produced + 1 and tts.closed == 1
    assert not pipeline.agent_speaking and pipeline.interruptions == 1
    interrupted = next(f for f in after if isinstance(f, MetricsFrame))
    assert interrupted.turn == 1 and interrupted.metrics["tts_first_byte_ms"] is not None

    # The interrupting utterance is heard and answered as the next turn.
    for frame in [SPEECH] * 5 + [SILENCE] * 6:
        await pipeline.push_audio(frame)
    frames = await collect_until(pipeline, AgentText)
    assert turns.texts == ["one two", "stop"]
    assert isinstance(frames[-1], AgentText) and frames[-1].turn == 2
    await pipeline.aclose()


async def test_the_end_of_the_conversation_ends_the_pipeline() -> None:
    stt, tts, turns = ScriptedStt("bye", "ignored"), FrameTts(frames=2), FakeTurns(end_after=1)
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    frames = await collect_until(pipeline, EndFrame)
    end = frames[-1]
    assert isinstance(end, EndFrame) and end.outcome == "completed" and end.reason == "flow_end"
    assert pipeline.ended
    await say(pipeline)
    await pipeline.drain()
    assert turns.texts == ["bye"] and len(stt.streams) == 1


async def test_hang_up_mid_utterance_still_runs_the_turn() -> None:
    stt, tts, turns = ScriptedStt("one"), FrameTts(frames=1), FakeTurns()
    pipeline = make(stt, tts, turns)
    for _ in range(8):
        await pipeline.push_audio(SPEECH)
    await pipeline.finish_input()
    await pipeline.drain()
    assert turns.texts == ["one"]


async def test_engine_failures_become_error_frames() -> None:
    stt, tts, turns = ScriptedStt("one"), FrameTts(fail=True), FakeTurns()
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    frames = await collect_until(pipeline, MetricsFrame)
    errors = [f for f in frames if isinstance(f, ErrorFrame)]
    assert errors and errors[0].detail == "Speech synthesis failed."
    assert not any(isinstance(f, AudioOut) for f in frames)


async def test_empty_transcripts_make_no_turn() -> None:
    stt, tts, turns = ScriptedStt(""), FrameTts(), FakeTurns()
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    await pipeline.drain()
    assert turns.texts == []


def test_frame_queue_bounds_data_and_keeps_control_frames() -> None:
    queue = FrameQueue(max_data=3)
    for i in range(5):
        queue.put(AudioOut(bytes([i]), 1))
        queue.put(AgentText(str(i), 1))
    assert queue.dropped == 2 and queue.data_frames == 3
    items = []
    while (frame := queue.get_nowait()) is not None:
        items.append(frame)
    assert [f.pcm for f in items if isinstance(f, AudioOut)] == [b"\x02", b"\x03", b"\x04"]
    assert len([f for f in items if isinstance(f, ControlFrame)]) == 5

    for i in range(3):
        queue.put(AudioOut(bytes([i]), 1))
    queue.put(AgentText("kept", 1))
    queue.put(Interrupt(1))
    rest = []
    while (frame := queue.get_nowait()) is not None:
        rest.append(frame)
    assert rest == [AgentText("kept", 1), Interrupt(1)] and queue.data_frames == 0


async def test_a_session_ended_elsewhere_ends_the_pipeline() -> None:
    class Ended(Exception):
        code = "session_ended"
        detail = "Session 'ses_x' has ended (idle_timeout); start a new one."

    class EndedTurns(FakeTurns):
        async def turn(self, text: str) -> Any:
            raise Ended()

    pipeline = make(ScriptedStt("hello"), FrameTts(), EndedTurns())
    await say(pipeline)
    frames = await collect_until(pipeline, EndFrame)
    error = next(f for f in frames if isinstance(f, ErrorFrame))
    assert error.code == "session_ended" and "idle_timeout" in error.detail
    assert pipeline.ended and frames[-1] == EndFrame(None, "session_ended")


async def test_each_spoken_text_is_followed_by_agent_spoken_and_timings_are_kept() -> None:
    stt, tts, turns = ScriptedStt("one", "two"), FrameTts(frames=3), FakeTurns()
    pipeline = make(stt, tts, turns)
    await say(pipeline)
    first = await collect_until(pipeline, MetricsFrame)
    await say(pipeline)
    second = await collect_until(pipeline, MetricsFrame)
    kinds = [type(f) for f in first]
    last_audio = max(i for i, k in enumerate(kinds) if k is AudioOut)
    assert kinds[last_audio + 1] is AgentSpoken and kinds[-1] is MetricsFrame
    spoken = next(f for f in second if isinstance(f, AgentSpoken))
    assert spoken.turn == 2
    assert [(t.turn, t.metrics_index, t.interrupted) for t in pipeline.timings] == [
        (1, 1, False),
        (2, 2, False),
    ]
    timing = pipeline.timings[0]
    # the time inside the engine's feed() and finish() calls (during the utterance, not after it)
    assert timing.figures.stt_engine_ms is not None and timing.figures.stt_engine_ms >= 0
    assert timing.as_dict()["stt_engine_ms"] == round(timing.figures.stt_engine_ms, 1)


async def test_a_greeting_is_spoken_outside_a_turn_and_can_be_interrupted() -> None:
    stt, tts, turns = ScriptedStt("one"), FrameTts(frames=200), FakeTurns()
    pipeline = make(stt, tts, turns)
    pipeline.speak(["Hello.", ""])
    frames = [await asyncio.wait_for(pipeline.out.get(), 5) for _ in range(3)]
    assert isinstance(frames[0], AgentText) and frames[0].text == "Hello." and frames[0].turn == 0
    assert all(isinstance(f, AudioOut) for f in frames[1:])
    assert pipeline.agent_speaking
    await say(pipeline, voiced=4, silence=0)
    rest = await collect_until(pipeline, Interrupt)
    assert isinstance(rest[-1], Interrupt) and rest[-1].turn == 0
    await say(pipeline, voiced=0, silence=6)
    after = await collect_until(pipeline, MetricsFrame)
    assert not any(isinstance(f, AgentSpoken) and f.turn == 0 for f in after)
    assert turns.texts == ["one"] and tts.texts[0] == "Hello."


async def test_after_the_hang_up_answers_are_committed_but_not_spoken() -> None:
    stt, tts, turns = ScriptedStt("seven"), FrameTts(frames=5), FakeTurns()
    pipeline = make(stt, tts, turns)
    await say(pipeline, voiced=10, silence=0)  # the caller hangs up mid-utterance
    await pipeline.finish_input()
    await pipeline.drain()
    frames = []
    while (frame := pipeline.out.get_nowait()) is not None:
        frames.append(frame)
    assert turns.texts == ["seven"]
    assert any(isinstance(f, AgentText) for f in frames)
    assert not any(isinstance(f, AudioOut) for f in frames) and tts.texts == []
    assert pipeline.timings[0].figures.voice_to_voice_ms is None
