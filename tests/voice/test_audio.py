from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from parley.voice import audio
from parley.voice.audio import (
    InvalidAudio,
    Resampler,
    as_samples,
    mulaw_to_pcm16,
    pcm16_to_mulaw,
    read_wav,
    resample,
    write_wav,
)


def sine(rate: int, hz: float, seconds: float = 0.5, amplitude: float = 10000) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return bytes((np.sin(2 * np.pi * hz * t) * amplitude).astype("<i2").tobytes())


def peak_hz(pcm: bytes, rate: int) -> float:
    samples = as_samples(pcm).astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])


def test_mulaw_known_values_and_one_byte_per_sample() -> None:
    pcm = np.array([0, -1, 32767, -32768, 100, -100], dtype="<i2").tobytes()
    encoded = pcm16_to_mulaw(pcm)
    assert len(encoded) == 6
    assert encoded[0] == 0xFF  # G.711: silence is 0xFF
    assert encoded[2] == 0x80 and encoded[3] == 0x00  # the loudest codes
    assert as_samples(mulaw_to_pcm16(bytes([0xFF, 0x7F])))[0] == 0


def test_mulaw_round_trip_error_is_within_the_quantisation_step() -> None:
    samples = np.arange(-32768, 32768, 7, dtype=np.int32)
    decoded = as_samples(mulaw_to_pcm16(pcm16_to_mulaw(samples.astype("<i2").tobytes()))).astype(np.int32)
    clipped = np.clip(samples, -32636, 32636)
    error = np.abs(decoded - clipped)
    # μ-law steps grow with the magnitude: at most 1/16 of it (plus the smallest step) is lost.
    assert np.all(error <= np.abs(clipped) / 16 + 8)
    # Decoding is monotonic and encoding a decoded value gives the same code.
    codes = bytes(range(256))
    assert pcm16_to_mulaw(mulaw_to_pcm16(codes)) == codes.replace(b"\x7f", b"\xff")


def test_the_mulaw_table_is_the_reference_encoder_for_every_sample() -> None:
    """The table is computed on whole arrays; the G.711 reference encoder, one sample at a time, is
    the judge (also where the standard library's audioop is gone, from Python 3.13 on)."""
    reference = [audio._encode_one(sample) for sample in range(-32768, 32768)]
    assert audio._encode_all().tolist() == reference


def test_mulaw_matches_the_standard_library_where_it_still_exists() -> None:
    audioop = pytest.importorskip("audioop")
    pcm = np.arange(-32768, 32768, dtype=np.int32).astype("<i2").tobytes()
    assert pcm16_to_mulaw(pcm) == audioop.lin2ulaw(pcm, 2)
    assert mulaw_to_pcm16(bytes(range(256))) == audioop.ulaw2lin(bytes(range(256)), 2)


@pytest.mark.parametrize(
    ("src", "dst"), [(8000, 16000), (16000, 8000), (22050, 16000), (16000, 24000), (24000, 8000)]
)
def test_resampling_keeps_length_and_pitch(src: int, dst: int) -> None:
    pcm = sine(src, 440.0, seconds=1.0)
    out = resample(pcm, src, dst)
    assert len(out) // 2 == dst
    assert abs(peak_hz(out, dst) - 440.0) < 3


def test_downsampling_filters_what_the_lower_rate_cannot_hold() -> None:
    # 6 kHz fits 16 kHz audio but not 8 kHz: it must be filtered out, not folded back to 2 kHz.
    out = as_samples(resample(sine(16000, 6000.0), 16000, 8000)).astype(np.float64)
    assert np.sqrt(np.mean(out[100:-100] ** 2)) < 10000 / np.sqrt(2) * 0.05


def test_streaming_resampler_equals_resampling_at_once() -> None:
    pcm = sine(22050, 300.0, seconds=0.7)
    whole = resample(pcm, 22050, 16000)
    resampler = Resampler(22050, 16000)
    pieces = [resampler.feed(pcm[i : i + 882]) for i in range(0, len(pcm), 882)]
    assert b"".join(pieces) + resampler.flush() == whole


def test_wav_round_trip_and_stereo_to_mono() -> None:
    pcm = sine(16000, 200.0, seconds=0.1)
    wav = read_wav(write_wav(pcm, 16000))
    assert wav.pcm16 == pcm and wav.sample_rate == 16000 and wav.duration_seconds == pytest.approx(0.1)

    stereo = np.stack([as_samples(pcm), np.zeros(1600, dtype=np.int16)], axis=1).astype("<i2").tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(2)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(stereo)
    mono = read_wav(buffer.getvalue())
    assert mono.sample_rate == 8000 and len(mono.pcm16) == len(pcm)
    assert np.allclose(as_samples(mono.pcm16), as_samples(pcm) / 2, atol=1)


def test_not_a_wav_file_says_so() -> None:
    with pytest.raises(InvalidAudio, match="not a PCM WAV"):
        read_wav(b"ID3\x03 this is an mp3")


@pytest.mark.parametrize(("src", "dst"), [(8000, 16000), (16000, 8000), (16000, 24000), (24000, 16000)])
def test_the_per_phase_correlation_gives_the_same_samples_as_the_gather(
    src: int, dst: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    noise = (np.random.default_rng(7).standard_normal(4000) * 6000).astype("<i2").tobytes()
    fast = resample(noise, src, dst)
    monkeypatch.setattr(audio, "_FAST_RATIO", 0)  # every ratio through the general path
    assert resample(noise, src, dst) == fast
