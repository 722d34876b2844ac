"""Voice activity detection with WebRTC's VAD (``webrtcvad-wheels``) and a small endpointing segmenter."""

from __future__ import annotations

import importlib.util
from collections import deque
from dataclasses import dataclass
from typing import Any

from parley.voice.engines.base import EngineUnavailable, Vad

VAD_RATES = (8000, 16000, 32000, 48000)
FRAME_MS = (10, 20, 30)


def vad_installed() -> bool:
    return importlib.util.find_spec("webrtcvad") is not None


class WebRtcVad:
    """``is_speech`` on 10/20/30 ms frames of PCM16 mono at 8, 16, 32 or 48 kHz.

    ``aggressiveness`` 0 (lets most audio through) to 3 (strict about what counts as speech).
    """

    def __init__(self, sample_rate: int = 16000, aggressiveness: int = 2) -> None:
        if sample_rate not in VAD_RATES:
            raise ValueError(f"the VAD works at {', '.join(map(str, VAD_RATES))} Hz, not {sample_rate}")
        if not 0 <= aggressiveness <= 3:
            raise ValueError("aggressiveness must be 0 to 3")
        try:
            import webrtcvad  # type: ignore[import-untyped]
        except ImportError as exc:
            raise EngineUnavailable(
                "Voice activity detection is not installed on this server; install 'webrtcvad-wheels'."
            ) from exc
        self.sample_rate = sample_rate
        self._vad: Any = webrtcvad.Vad(aggressiveness)

    def frame_bytes(self, frame_ms: int) -> int:
        return self.sample_rate * frame_ms // 1000 * 2

    def is_speech(self, frame: bytes) -> bool:
        if len(frame) not in {self.frame_bytes(ms) for ms in FRAME_MS}:
            raise ValueError("a VAD frame is 10, 20 or 30 ms of PCM16 mono audio")
        return bool(self._vad.is_speech(frame, self.sample_rate))


@dataclass(frozen=True)
class SegmentEvent:
    kind: str  # "start" or "end"
    at_ms: int  # stream time of the event (speech start includes the pre-roll)
    audio: bytes = b""  # on "start": the pre-roll frames to feed before the current frame


class SpeechSegmenter:
    """Endpointing over VAD decisions, frame by frame.

    Speech starts after ``start_ms`` of mostly voiced frames (``start_ratio``) and ends after
    ``stop_ms`` of unvoiced ones (the hangover). ``preroll_ms`` of audio before the start is kept so
    the first syllable is not cut.
    """

    def __init__(
        self,
        vad: Vad,
        *,
        frame_ms: int = 20,
        frame_bytes: int,
        start_ms: int = 60,
        stop_ms: int = 600,
        preroll_ms: int = 300,
        start_ratio: float = 0.7,
    ) -> None:
        if frame_ms not in FRAME_MS:
            raise ValueError("frame_ms must be 10, 20 or 30")
        self.vad = vad
        self.frame_ms = frame_ms
        self.frame_bytes = frame_bytes
        self.start_frames = max(1, start_ms // frame_ms)
        self.stop_frames = max(1, stop_ms // frame_ms)
        self.start_ratio = start_ratio
        self._window: deque[bool] = deque(maxlen=self.start_frames)
        self._preroll: deque[bytes] = deque(maxlen=max(self.start_frames, preroll_ms // frame_ms))
        self._silent = 0
        self._frames = 0
        self.in_speech = False
        self.voiced = False  # the VAD's decision on the last frame

    @property
    def silent_ms(self) -> int:
        """How long the speech in progress has been unvoiced (0 outside speech)."""
        return self._silent * self.frame_ms if self.in_speech else 0

    def set_hangover(self, stop_ms: int) -> None:
        """The silence that ends speech from now on (the pipeline sets it per question)."""
        self.stop_frames = max(1, stop_ms // self.frame_ms)

    def end_now(self) -> SegmentEvent | None:
        """End the speech in progress at once (the answer is complete): the event ``process`` would
        have answered after the full hangover, dated at the start of the silence."""
        if not self.in_speech:
            return None
        silent, self._silent = self._silent, 0
        self.in_speech = False
        return SegmentEvent("end", self._frames * self.frame_ms - silent * self.frame_ms)

    def process(self, frame: bytes) -> SegmentEvent | None:
        """Feed one frame; answer a start or end event when the state changes."""
        voiced = self.voiced = self.vad.is_speech(frame)
        self._frames += 1
        now_ms = self._frames * self.frame_ms
        if not self.in_speech:
            self._window.append(voiced)
            self._preroll.append(frame)
            full = len(self._window) == self._window.maxlen
            if full and sum(self._window) >= self.start_ratio * len(self._window):
                self.in_speech = True
                self._silent = 0
                audio = b"".join(self._preroll)
                started = now_ms - len(self._preroll) * self.frame_ms
                self._window.clear()
                self._preroll.clear()
                return SegmentEvent("start", max(0, started), audio)
            return None
        self._silent = 0 if voiced else self._silent + 1
        if self._silent >= self.stop_frames:
            self.in_speech = False
            self._silent = 0
            return SegmentEvent("end", now_ms - self.stop_frames * self.frame_ms)
        return None
