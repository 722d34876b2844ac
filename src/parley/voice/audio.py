"""Audio helpers on 16-bit little-endian mono PCM: G.711 μ-law, resampling, WAV files.

Pure functions over ``bytes`` (with numpy inside), so the pipeline never needs the deprecated
``audioop`` module (gone in Python 3.13).
"""

from __future__ import annotations

import io
import math
import wave
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

Int16Array = npt.NDArray[np.int16]

_MULAW_BIAS = 0x84
_MULAW_CLIP = 8159  # in 14-bit units, as in the G.711 reference code
_SEGMENT_ENDS = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)


def _encode_one(sample: int) -> int:
    """The G.711 reference encoder (the one ``audioop.lin2ulaw`` uses)."""
    value = sample >> 2
    if value < 0:
        value, mask = -value, 0x7F
    else:
        mask = 0xFF
    value = min(value, _MULAW_CLIP) + (_MULAW_BIAS >> 2)
    segment = next((i for i, end in enumerate(_SEGMENT_ENDS) if value <= end), 8)
    if segment >= 8:
        return 0x7F ^ mask
    return ((segment << 4) | ((value >> (segment + 1)) & 0x0F)) ^ mask


def _decode_one(byte: int) -> int:
    byte = ~byte & 0xFF
    sign = byte & 0x80
    exponent = (byte >> 4) & 0x07
    mantissa = byte & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    return -magnitude if sign else magnitude


def _encode_all() -> npt.NDArray[np.uint8]:
    """``_encode_one`` of every 16-bit sample, computed on whole arrays: a loop over the 65,536 samples
    took about 0.1 s of CPU in every process that imports the app (each test server and ``python -m
    parley`` subprocess among them)."""
    value = np.arange(-32768, 32768, dtype=np.int32) >> 2
    mask = np.where(value < 0, 0x7F, 0xFF)
    value = np.minimum(np.abs(value), _MULAW_CLIP) + (_MULAW_BIAS >> 2)
    segment = np.searchsorted(np.array(_SEGMENT_ENDS), value)  # the first segment whose end >= value
    code = np.where(segment >= 8, 0x7F, (segment << 4) | ((value >> np.minimum(segment + 1, 8)) & 0x0F))
    return (code ^ mask).astype(np.uint8)


# Lookup tables: every 16-bit sample → μ-law byte, every μ-law byte → sample.
_ENCODE = _encode_all()
_DECODE = np.array([_decode_one(b) for b in range(256)], dtype=np.int16)


def as_samples(pcm16: bytes) -> Int16Array:
    if len(pcm16) % 2:
        raise ValueError("PCM16 audio must have an even number of bytes")
    return np.frombuffer(pcm16, dtype="<i2").astype(np.int16, copy=False)


def pcm16_to_mulaw(pcm16: bytes) -> bytes:
    """Encode PCM16 as G.711 μ-law (one byte per sample)."""
    samples = as_samples(pcm16).astype(np.int32) + 32768
    return bytes(_ENCODE[samples].tobytes())


def mulaw_to_pcm16(mulaw: bytes) -> bytes:
    """Decode G.711 μ-law to PCM16."""
    codes = np.frombuffer(mulaw, dtype=np.uint8)
    return bytes(_DECODE[codes].astype("<i2").tobytes())


_TAPS = 32  # one side of the windowed-sinc kernel


@lru_cache(maxsize=16)
def _kernel(src: int, dst: int) -> tuple[int, int, npt.NDArray[np.float64]]:
    """Polyphase filter bank for src → dst: (up, down, filters[up, 2*_TAPS])."""
    g = math.gcd(src, dst)
    up, down = dst // g, src // g
    cutoff = min(1.0, dst / src) * 0.95  # low-pass below the lower Nyquist frequency
    offsets = np.arange(-_TAPS + 1, _TAPS + 1)
    phases = np.arange(up) / up
    d = offsets[None, :] - phases[:, None]
    window = 0.5 + 0.5 * np.cos(np.pi * d / (_TAPS + 1))
    bank = cutoff * np.sinc(cutoff * d) * window
    return up, down, bank


def _convolve(
    padded: npt.NDArray[np.float64], origin: int, first: int, last: int, up: int, down: int
) -> Int16Array:
    """Output samples ``first..last-1``; ``padded[i - origin]`` is input sample ``i``."""
    _, _, bank = _kernel_for(up, down)
    if up * down <= _FAST_RATIO:
        return _convolve_phases(padded, origin, first, last, up, down, bank)
    offsets = np.arange(-_TAPS + 1, _TAPS + 1)
    out = np.empty(max(0, last - first), dtype=np.float64)
    step = 8192  # bounded memory for long inputs
    for start in range(first, last, step):
        stop = min(start + step, last)
        positions = np.arange(start, stop, dtype=np.int64) * down
        index = (positions // up)[:, None] + offsets[None, :] - origin
        out[start - first : stop - first] = (padded[index] * bank[positions % up]).sum(axis=1)
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


_FAST_RATIO = 12  # simple ratios (8k↔16k, 16k↔24k, 16k↔48k): one correlation per filter phase


def _convolve_phases(
    padded: npt.NDArray[np.float64],
    origin: int,
    first: int,
    last: int,
    up: int,
    down: int,
    bank: npt.NDArray[np.float64],
) -> Int16Array:
    """:func:`_convolve` for small ``up``/``down``: the outputs sharing a filter phase are one strided
    correlation (numpy's C loop) instead of a gather per output sample. Same sums, same order."""
    count = max(0, last - first)
    out = np.empty(count, dtype=np.float64)
    for start in range(first, min(first + up, last)):
        phase = start * down % up
        base = start * down // up - _TAPS + 1 - origin  # padded index of this output's first tap
        outputs = range(start, last, up)
        span = (len(outputs) - 1) * down + 2 * _TAPS
        window = padded[base : base + span]
        out[start - first :: up] = np.correlate(window, bank[phase], mode="valid")[::down]
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)


def _kernel_for(up: int, down: int) -> tuple[int, int, npt.NDArray[np.float64]]:
    return _kernel(down, up)


class Resampler:
    """Streaming resampler: feed chunks of any size, get the resampled audio so far; ``flush`` the tail.

    Chunk borders are seamless: the output equals resampling the whole signal at once.
    """

    def __init__(self, src: int, dst: int) -> None:
        if src <= 0 or dst <= 0:
            raise ValueError("sample rates must be positive")
        self.src, self.dst = src, dst
        g = math.gcd(src, dst)
        self._up, self._down = dst // g, src // g
        self._buffer = np.zeros(0, dtype=np.float64)
        self._buffer_start = 0  # absolute index of _buffer[0]
        self._next = 0  # absolute index of the next output sample

    def _produce(self, last: int) -> bytes:
        if last <= self._next:
            return b""
        # Zero padding on both sides stands in for the signal before the start and after the end.
        padded = np.pad(self._buffer, (_TAPS, _TAPS))
        origin = self._buffer_start - _TAPS
        out = _convolve(padded, origin, self._next, last, self._up, self._down)
        self._next = last
        keep_from = max(self._buffer_start, self._next * self._down // self._up - _TAPS)
        self._buffer = self._buffer[keep_from - self._buffer_start :]
        self._buffer_start = keep_from
        return bytes(out.astype("<i2").tobytes())

    def feed(self, pcm16: bytes) -> bytes:
        if self.src == self.dst:
            return pcm16
        self._buffer = np.concatenate([self._buffer, as_samples(pcm16).astype(np.float64)])
        total = self._buffer_start + self._buffer.size
        # Output j needs input up to floor(j * down / up) + _TAPS.
        last = max(0, ((total - _TAPS) * self._up + self._down - 1) // self._down)
        return self._produce(last)

    def flush(self) -> bytes:
        if self.src == self.dst:
            return b""
        total = self._buffer_start + self._buffer.size
        return self._produce(-(-total * self._up // self._down))


def resample_samples(samples: Int16Array, src: int, dst: int) -> Int16Array:
    """Resample with a windowed-sinc low-pass filter (anti-aliasing when going down)."""
    if src <= 0 or dst <= 0:
        raise ValueError("sample rates must be positive")
    if src == dst or samples.size == 0:
        return samples
    resampler = Resampler(src, dst)
    data = samples.astype("<i2").tobytes()
    return as_samples(resampler.feed(data) + resampler.flush())


def resample(pcm16: bytes, src: int, dst: int) -> bytes:
    """Resample PCM16 mono from ``src`` Hz to ``dst`` Hz (8k ↔ 16k ↔ 22.05k/24k and others)."""
    return bytes(resample_samples(as_samples(pcm16), src, dst).astype("<i2").tobytes())


@dataclass(frozen=True)
class Wav:
    pcm16: bytes
    sample_rate: int

    @property
    def duration_seconds(self) -> float:
        return len(self.pcm16) / 2 / self.sample_rate


class InvalidAudio(ValueError):
    """The bytes are not audio this pipeline can read; the message says why."""


def read_wav(data: bytes) -> Wav:
    """Read a PCM WAV file (8/16-bit, mono or stereo) as PCM16 mono at its own rate."""
    try:
        with wave.open(io.BytesIO(data), "rb") as reader:
            channels = reader.getnchannels()
            width = reader.getsampwidth()
            rate = reader.getframerate()
            frames = reader.readframes(reader.getnframes())
    except (wave.Error, EOFError) as exc:
        raise InvalidAudio("The file is not a PCM WAV file (RIFF/WAVE, uncompressed).") from exc
    if rate < 4000 or rate > 192000:
        raise InvalidAudio(f"The WAV sample rate {rate} Hz is out of range (4000–192000 Hz).")
    if channels < 1 or channels > 8:
        raise InvalidAudio(f"The WAV file has {channels} channels; 1 to 8 are supported.")
    if width == 2:
        samples = np.frombuffer(frames[: len(frames) // 2 * 2], dtype="<i2").astype(np.int32)
    elif width == 1:
        samples = (np.frombuffer(frames, dtype=np.uint8).astype(np.int32) - 128) << 8
    else:
        raise InvalidAudio(f"The WAV file has {width * 8}-bit samples; 8 and 16 bit are supported.")
    usable = samples.size // channels * channels
    mono = samples[:usable].reshape(-1, channels).mean(axis=1) if channels > 1 else samples[:usable]
    return Wav(bytes(np.asarray(mono).astype("<i2").tobytes()), rate)


def write_wav(pcm16: bytes, sample_rate: int) -> bytes:
    """A mono 16-bit WAV file holding ``pcm16``."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(sample_rate)
        writer.writeframes(pcm16)
    return out.getvalue()
