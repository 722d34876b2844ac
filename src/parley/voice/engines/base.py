"""The interfaces every speech engine implements, and the errors they raise.

- :class:`SttEngine` opens a :class:`SttStream`: ``feed`` PCM16 mono audio as it arrives, iterate
  partial and final :class:`Transcript` objects, ``finish`` at the end of the audio.
- :class:`TtsEngine` turns text into an async iterator of PCM16 mono chunks; closing the iterator
  (``aclose``, or leaving an ``async for`` early) stops synthesis promptly.
- :class:`Vad` says whether a 10/20/30 ms frame holds speech.

The errors subclass the platform's typed errors, so a route can let them through: a missing engine
or model is 503, a language or voice it lacks 400, a vendor failure 502, a vendor time-out 504.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from parley.kit.errors import BadRequest, ServiceUnavailable, UpstreamError, UpstreamTimeout


class EngineUnavailable(ServiceUnavailable):
    """The engine (its package or model) is not installed on this server."""


class LanguageUnavailable(BadRequest):
    """The engine has no model for the requested language or voice."""


class VendorError(UpstreamError):
    """The speech vendor failed or refused the request."""


class VendorTimeout(UpstreamTimeout):
    """The speech vendor did not answer in time."""


@dataclass(frozen=True)
class Word:
    text: str
    start_ms: int
    end_ms: int
    confidence: float | None = None


@dataclass(frozen=True)
class Transcript:
    text: str
    is_final: bool
    start_ms: int
    end_ms: int
    confidence: float | None = None
    words: tuple[Word, ...] = field(default=())


class SttStream(abc.ABC):
    """One stream of audio being recognised. Not safe for concurrent ``feed`` calls."""

    @abc.abstractmethod
    def feed(self, pcm16: bytes) -> None:
        """Hand over the next piece of audio (PCM16 mono at the stream's sample rate); never blocks."""

    @abc.abstractmethod
    async def finish(self) -> None:
        """No more audio: the last utterance is finalised and iteration ends after it."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop at once, dropping what is not recognised yet."""

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[Transcript]: ...

    async def __aenter__(self) -> SttStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class SttEngine(abc.ABC):
    name: str

    @abc.abstractmethod
    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        """Open a stream; ``phrases`` hint the expected words (a vocabulary for engines that take one)."""


class TtsEngine(abc.ABC):
    name: str

    @abc.abstractmethod
    def synthesize(
        self, text: str, *, voice: str | None, language: str | None, sample_rate: int
    ) -> AsyncIterator[bytes]:
        """PCM16 mono chunks at ``sample_rate``; errors surface on the first iteration."""


class Vad(Protocol):
    def is_speech(self, frame: bytes) -> bool:
        """Whether the frame (10, 20 or 30 ms of PCM16 mono at the VAD's rate) holds speech."""
        ...
