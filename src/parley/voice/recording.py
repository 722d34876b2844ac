"""Stereo call recordings: the caller on the left channel, the agent on the right, one timeline.

The caller's audio is the clock: every caller sample received moves the timeline on. Agent audio is
placed where it is handed to the transport — right after the agent audio before it, or at the
caller's current position when the agent has been quiet. Agent audio that lies ahead of the caller's
position has not been heard yet; a barge-in (:meth:`StereoRecorder.interrupt`) cuts it off there, as
the transport's buffer is cleared. Everything behind the caller's position is written at once to a
WAV file on disk (16-bit stereo), so memory holds at most the agent audio not yet heard.

The recording stops growing at ``max_seconds`` (the beginning of a call is kept).
"""

from __future__ import annotations

import contextlib
import tempfile
import wave
from pathlib import Path

import numpy as np

from parley.voice.audio import as_samples

# Agent audio ahead of the caller (not heard yet) beyond this is written out with silence on the left.
MAX_PENDING_SECONDS = 30


class StereoRecorder:
    """Write a call's two sides into one stereo WAV file in ``directory`` (a temporary file)."""

    def __init__(self, sample_rate: int, max_seconds: float, directory: Path | str | None = None) -> None:
        self.sample_rate = sample_rate
        self.max_frames = int(max_seconds * sample_rate)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open for the whole call
            prefix="parley-recording-", suffix=".wav", dir=directory, delete=False
        )
        self.path = Path(handle.name)
        self._file = handle
        self._writer: wave.Wave_write | None = wave.open(handle, "wb")  # noqa: SIM115
        self._writer.setnchannels(2)
        self._writer.setsampwidth(2)
        self._writer.setframerate(sample_rate)
        self.written = 0  # stereo frames on disk
        self._agent = bytearray()  # agent samples from ``written`` on (ahead of the caller, unheard)
        self.caller_samples = 0
        self.agent_samples = 0
        self.truncated = False

    # --- positions ---------------------------------------------------------------------------

    @property
    def caller_position(self) -> int:
        return self.written

    @property
    def agent_position(self) -> int:
        return self.written + len(self._agent) // 2

    @property
    def seconds(self) -> float:
        return self.agent_position / self.sample_rate

    # --- input -------------------------------------------------------------------------------

    def add_caller(self, pcm16: bytes) -> None:
        """The caller's audio, in order, at ``sample_rate`` (mono PCM16)."""
        if self._writer is None or not pcm16:
            return
        self.caller_samples += len(pcm16) // 2
        left = as_samples(pcm16[: len(pcm16) // 2 * 2])
        right = np.zeros(left.size, dtype=np.int16)
        ahead = min(len(self._agent) // 2, left.size)
        if ahead:
            right[:ahead] = as_samples(bytes(self._agent[: ahead * 2]))
            del self._agent[: ahead * 2]
        self._write(left, right)

    def add_agent(self, pcm16: bytes) -> None:
        """The agent's audio as the transport sends it (mono PCM16 at ``sample_rate``)."""
        if self._writer is None or not pcm16:
            return
        self.agent_samples += len(pcm16) // 2
        self._agent += pcm16[: len(pcm16) // 2 * 2]
        if len(self._agent) // 2 > MAX_PENDING_SECONDS * self.sample_rate:
            self._flush_agent()

    def interrupt(self) -> None:
        """Barge-in: the agent audio the caller has not heard yet was cleared; drop it."""
        self._agent.clear()

    # --- output ------------------------------------------------------------------------------

    def _flush_agent(self) -> None:
        right = as_samples(bytes(self._agent))
        self._agent.clear()
        self._write(np.zeros(right.size, dtype=np.int16), right)

    def _write(self, left: np.ndarray, right: np.ndarray) -> None:
        assert self._writer is not None
        room = self.max_frames - self.written
        if room <= 0:
            self.truncated = True
            return
        if left.size > room:
            left, right, self.truncated = left[:room], right[:room], True
        stereo = np.empty(left.size * 2, dtype="<i2")
        stereo[0::2], stereo[1::2] = left, right
        self._writer.writeframes(stereo.tobytes())
        self.written += left.size

    def finish(self) -> Path | None:
        """Close the file (the agent's last words included); its path, or None when nothing was said."""
        if self._writer is None:
            return None
        if self._agent:
            self._flush_agent()
        self._writer.close()
        self._writer = None
        self._file.close()
        if self.written == 0:
            self.discard()
            return None
        return self.path

    def discard(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
            self._file.close()
        self.path.unlink(missing_ok=True)
