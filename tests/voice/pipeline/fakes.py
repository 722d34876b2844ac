"""Deterministic stand-ins for the speech engines and the session's turn, for pipeline tests."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence

from parley.runtime.engine import AgentEvent, TurnResult
from parley.voice.engines.base import SttEngine, SttStream, Transcript, TtsEngine
from parley.voice.pipeline.pipeline import TurnReply

RATE = 16000
FRAME_BYTES = 640  # 20 ms of PCM16 mono at 16 kHz
SPEECH = b"\x10\x27" * 320  # a voiced frame (sample 10000)
SILENCE = b"\x00\x00" * 320
# a 400 Hz tone (whole periods in 20 ms), loud enough to find in a recording
TONE = b"".join(
    int(8000 * math.sin(2 * math.pi * 400 * i / RATE)).to_bytes(2, "little", signed=True) for i in range(320)
)


class LoudnessVad:
    """A frame is speech when its first sample is not zero."""

    def is_speech(self, frame: bytes) -> bool:
        return frame[:2] != b"\x00\x00"


class ScriptedStream(SttStream):
    def __init__(self, engine: ScriptedStt) -> None:
        self.engine = engine
        self.fed = 0
        self.queue: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self.closed = False

    def feed(self, pcm16: bytes) -> None:
        if self.fed == 0:
            self.queue.put_nowait(Transcript(self.engine.partial, False, 0, 0))
        self.fed += len(pcm16)

    async def finish(self) -> None:
        text = self.engine.script.pop(0) if self.engine.script else ""
        self.queue.put_nowait(Transcript(text, True, 0, self.fed // 32))
        self.queue.put_nowait(None)

    async def aclose(self) -> None:
        self.closed = True
        self.queue.put_nowait(None)

    async def _iterate(self) -> AsyncIterator[Transcript]:
        while (item := await self.queue.get()) is not None:
            yield item

    def __aiter__(self) -> AsyncIterator[Transcript]:
        return self._iterate()


class ScriptedStt(SttEngine):
    """Answers the next scripted transcript when an utterance ends (a partial first)."""

    name = "scripted"

    def __init__(self, *script: str, partial: str = "…", fail: bool = False) -> None:
        self.script = list(script)
        self.partial = partial  # the partial transcript at the utterance's first frame
        self.fail = fail  # opening a stream fails (the engine is down)
        self.streams: list[ScriptedStream] = []
        self.phrases: list[Sequence[str] | None] = []

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        if self.fail:
            raise RuntimeError("the recognizer is down")
        stream = ScriptedStream(self)
        self.streams.append(stream)
        self.phrases.append(phrases)
        return stream


class FrameTts(TtsEngine):
    """``frames`` frames of audio per text, one per step of the event loop; records closing."""

    name = "frames"

    def __init__(self, frames: int = 10, fail: bool = False, pcm: bytes = b"\x01\x00" * 320) -> None:
        self.frames = frames
        self.pcm = pcm  # one 20 ms frame at 16 kHz
        self.fail = fail
        self.texts: list[str] = []
        self.closed = 0
        self.produced = 0

    def synthesize(
        self, text: str, *, voice: str | None, language: str | None, sample_rate: int
    ) -> AsyncIterator[bytes]:
        self.texts.append(text)
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        try:
            if self.fail:
                raise RuntimeError("boom")
            for _ in range(self.frames):
                self.produced += 1
                yield self.pcm
                await asyncio.sleep(0)
        finally:
            self.closed += 1


class TextTts(FrameTts):
    """Like :class:`FrameTts`, but each text's frames carry a sample of their own (the text's number in
    ``texts``), so the order of what was said can be read from the audio."""

    name = "text"

    def synthesize(
        self, text: str, *, voice: str | None, language: str | None, sample_rate: int
    ) -> AsyncIterator[bytes]:
        self.texts.append(text)
        return self._text(len(self.texts).to_bytes(2, "little") * 320)

    async def _text(self, pcm: bytes) -> AsyncIterator[bytes]:
        for _ in range(self.frames):
            self.produced += 1
            yield pcm
            await asyncio.sleep(0)


class FakeTurns:
    """The session's turn: says ``reply`` (with the caller's text), ends after ``end_after`` turns."""

    def __init__(
        self, reply: str = "You said {text}.", end_after: int | None = None, tool: bool = False
    ) -> None:
        self.reply = reply
        self.end_after = end_after
        self.tool = tool
        self.texts: list[str] = []

    async def turn(self, text: str) -> TurnReply:
        self.texts.append(text)
        events = []
        if self.tool:
            events.append(AgentEvent("tool_call", "n1", data={"tool": "lookup", "status": "ok"}))
        events.append(AgentEvent("say", "n1", self.reply.format(text=text)))
        ended = self.end_after is not None and len(self.texts) >= self.end_after
        result = TurnResult(events=events, engine_ms=1.5, llm_first_token_ms=12.0)
        return TurnReply(
            result,
            ended=ended,
            outcome="completed" if ended else None,
            reason="flow_end" if ended else None,
            metrics_index=len(self.texts),  # entry 0 is the flow's opening
        )
