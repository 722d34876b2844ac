"""Frames that flow through the voice pipeline.

Control frames (speech events, transcripts, agent text, metrics, interruptions, the end) always pass;
data frames (the agent's audio) are dropped when the caller interrupts. :class:`FrameQueue` is the
bounded queue between the pipeline and a transport: it drops the oldest data frame when full and
clears every buffered data frame on an interruption, but never loses a control frame.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Frame:
    """Base of every frame."""


@dataclass(frozen=True)
class DataFrame(Frame):
    """Dropped by an interruption."""


@dataclass(frozen=True)
class ControlFrame(Frame):
    """Always delivered."""


@dataclass(frozen=True)
class AudioOut(DataFrame):
    """PCM16 mono audio of the agent, at the pipeline's sample rate (one frame, usually 20 ms)."""

    pcm: bytes
    turn: int


@dataclass(frozen=True)
class SpeechStarted(ControlFrame):
    at_ms: int


@dataclass(frozen=True)
class SpeechEnded(ControlFrame):
    at_ms: int


@dataclass(frozen=True)
class TranscriptFrame(ControlFrame):
    text: str
    final: bool


@dataclass(frozen=True)
class AgentText(ControlFrame):
    text: str
    turn: int
    node_id: str | None = None


@dataclass(frozen=True)
class AgentSpoken(ControlFrame):
    """Every audio frame of one agent text has been handed out (a telephony transport marks it)."""

    turn: int


@dataclass(frozen=True)
class ToolCallFrame(ControlFrame):
    data: dict[str, Any]
    node_id: str | None = None


@dataclass(frozen=True)
class Interrupt(ControlFrame):
    """The caller spoke over the agent: the transport drops the agent audio it still buffers."""

    turn: int


@dataclass(frozen=True)
class MetricsFrame(ControlFrame):
    turn: int
    metrics: dict[str, Any]  # TurnTimings.as_dict(): engine_ms and the VoiceTurnMetrics fields


@dataclass(frozen=True)
class EndFrame(ControlFrame):
    outcome: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ErrorFrame(ControlFrame):
    code: str
    detail: str


@dataclass(frozen=True)
class WarningFrame(ControlFrame):
    code: str
    detail: str


@dataclass
class FrameQueue:
    """Bounded queue of frames for a transport's writer.

    ``max_data`` bounds the data frames held (the oldest goes when full, counted in ``dropped``);
    control frames are few and always kept.
    """

    max_data: int = 500
    dropped: int = 0
    _items: deque[Frame] = field(default_factory=deque)
    _data: int = 0
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _drained: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, frame: Frame) -> None:
        if isinstance(frame, DataFrame):
            if self._data >= self.max_data:
                self._drop_oldest_data()
            self._data += 1
        if isinstance(frame, Interrupt):
            self.clear_data()
        self._items.append(frame)
        self._ready.set()

    def _drop_oldest_data(self) -> None:
        for i, item in enumerate(self._items):
            if isinstance(item, DataFrame):
                del self._items[i]
                self._data -= 1
                self._drained.set()
                self.dropped += 1
                return

    def clear_data(self) -> int:
        """Drop every buffered data frame; answer how many."""
        kept = deque(f for f in self._items if not isinstance(f, DataFrame))
        cleared = len(self._items) - len(kept)
        self._items = kept
        self._data = 0
        self._drained.set()
        return cleared

    @property
    def data_frames(self) -> int:
        return self._data

    def __len__(self) -> int:
        return len(self._items)

    def get_nowait(self) -> Frame | None:
        if not self._items:
            self._ready.clear()
            return None
        frame = self._items.popleft()
        if isinstance(frame, DataFrame):
            self._data -= 1
            self._drained.set()
        return frame

    async def wait_below(self, limit: int) -> None:
        """Back-pressure for a producer: wait until fewer than ``limit`` data frames are queued."""
        while self._data >= limit:
            self._drained.clear()
            await self._drained.wait()

    async def get(self) -> Frame:
        while True:
            frame = self.get_nowait()
            if frame is not None:
                return frame
            self._ready.clear()
            await self._ready.wait()
