"""Voice mode: the caller's scripted lines spoken by the offline voice (eSpeak NG), fed in 20 ms frames
through the real voice pipeline (VAD endpointing, streaming recognition with the collect node's
phrases, the flow engine, streaming synthesis of the answer), over in-memory state as in text mode.

Each turn adds what the pipeline heard, the recognition accuracy (the caller's words heard as said,
1 − word error rate) and the pipeline's latency figures (``voice_to_voice_ms`` and its parts). Audio is
fed as fast as the pipeline takes it, not paced in real time, so a run does not last as long as its
calls would. A silent turn feeds one second of silence and then gives the engine an empty answer (the
live pipeline's re-prompt does the same on a call); nothing is recognised for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from parley.evaluations.expectations import Conversation
from parley.evaluations.schemas import Scenario
from parley.flows.definition import FlowDefinition
from parley.runtime.engine import FlowEngine, TurnResult
from parley.voice.engines.base import SttEngine, TtsEngine, Vad
from parley.voice.pipeline.frames import ErrorFrame
from parley.voice.pipeline.pipeline import PipelineConfig, TurnReply, VoicePipeline
from parley.voice.session_call import phrases_for

SAMPLE_RATE = 16000
FRAME_BYTES = SAMPLE_RATE * 20 // 1000 * 2
TRAILING_SILENCE_FRAMES = 50  # 1 s: more than the endpointing's 600 ms
ANSWER_WAIT_SECONDS = 30.0  # after the caller's audio: recognition, the turn and the spoken answer
CALLER_VOICES = {"de": "de", "en": "en-us"}
_WORD = re.compile(r"\w+")

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


@dataclass
class VoiceTurn:
    said: str
    heard: str = ""
    timings: dict[str, float | None] | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "said": self.said,
            "heard": self.heard,
            "recognition_accuracy": word_accuracy(self.said, self.heard) if self.said else None,
            **(self.timings or {}),
        }


class _EngineTurns:
    """The pipeline's turn port over the in-memory conversation."""

    def __init__(self, engine: FlowEngine, definition: FlowDefinition, conversation: Conversation) -> None:
        self.engine, self.definition, self.conversation = engine, definition, conversation
        self.last: TurnResult | None = None
        self.heard = ""

    def phrases(self) -> list[str] | None:
        state = self.conversation.state
        language = str(state.variables.get("language") or self.definition.language)
        return phrases_for(self.definition, state.current_node, language)

    async def turn(self, text: str) -> TurnReply:
        state = self.conversation.state
        self.heard = text
        self.last = await self.engine.handle(state, text)
        return TurnReply(
            self.last,
            ended=state.status != "active",
            outcome=state.outcome,
            reason=state.end_reason,
            phrases=self.phrases(),
        )


async def _speak(tts: TtsEngine, text: str, language: str) -> list[bytes]:
    voice = CALLER_VOICES.get(language[:2], language)
    audio = b"".join(
        [c async for c in tts.synthesize(text, voice=voice, language=language, sample_rate=SAMPLE_RATE)]
    )
    audio += b"\0" * (-len(audio) % FRAME_BYTES)
    return [audio[i : i + FRAME_BYTES] for i in range(0, len(audio), FRAME_BYTES)]


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
) -> list[VoiceTurn]:
    """Play the scripted turns through a pipeline, recording each turn as text mode does."""
    state = conversation.state
    language = str(state.variables.get("language") or definition.language)
    port = _EngineTurns(engine, definition, conversation)
    config = PipelineConfig(sample_rate=SAMPLE_RATE, language=language, phrases=port.phrases())
    pipeline = VoicePipeline(stt=stt, tts=agent_tts, vad=vad, turns=port, config=config)
    problems: list[str] = []

    async def listen() -> None:  # the transport's side: take every frame, keep the errors
        while True:
            frame = await pipeline.out.get()
            if isinstance(frame, ErrorFrame):
                problems.append(frame.detail)

    listener = asyncio.create_task(listen())
    figures: list[VoiceTurn] = []
    silence = b"\0" * FRAME_BYTES
    try:
        for number, turn in enumerate(scenario.turns, start=1):
            if state.status != "active":
                conversation.unused_turns = len(scenario.turns) - number + 1
                break
            if turn.silence:
                for _ in range(TRAILING_SILENCE_FRAMES):
                    await pipeline.push_audio(silence)
                    await asyncio.sleep(0)
                record(conversation, number, "", await engine.handle(state, ""))
                pipeline.phrases = port.phrases()
                figures.append(VoiceTurn(""))
                continue
            port.last, port.heard = None, ""
            before = len(pipeline.timings)
            for frame in [
                *await _speak(caller_tts, turn.text, language),
                *[silence] * TRAILING_SILENCE_FRAMES,
            ]:
                await pipeline.push_audio(frame)
                await asyncio.sleep(0)  # let recognition and the answer run beside the audio
            with contextlib.suppress(TimeoutError):  # the utterance's recognition, turn and answer
                await asyncio.wait_for(pipeline.drain(), ANSWER_WAIT_SECONDS)
            if problems:
                raise VoiceFailure(problems[0])
            figure = VoiceTurn(turn.text, port.heard)
            if port.last is not None:
                if len(pipeline.timings) > before:
                    figure.timings = pipeline.timings[-1].as_dict()
                record(conversation, number, port.heard, port.last)
            else:  # nothing recognised: the agent heard no answer
                record(conversation, number, "", TurnResult())
            figures.append(figure)
    finally:
        await pipeline.aclose()
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    return figures
