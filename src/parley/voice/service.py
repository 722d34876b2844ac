"""Inference: speech from text and text from speech, with the engines the registry picks."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from parley.kit.errors import PayloadTooLarge, UnsupportedMediaType
from parley.voice.audio import InvalidAudio, Wav, read_wav, write_wav
from parley.voice.engines.base import SttEngine, Transcript, TtsEngine, VendorTimeout
from parley.voice.schemas import SegmentOut, SttOut, WordOut

MAX_AUDIO_BYTES = 10 * 1024 * 1024
MAX_AUDIO_SECONDS = 60.0
MAX_SPEECH_BYTES = 48 * 1024 * 1024  # generous for 2000 characters at 24 kHz
FEED_MS = 100


async def synthesize(
    engine: TtsEngine,
    text: str,
    *,
    voice: str | None,
    language: str | None,
    sample_rate: int,
    limit_seconds: float,
) -> bytes:
    """The whole utterance as PCM16 mono at ``sample_rate``."""
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(limit_seconds):
            stream = engine.synthesize(text, voice=voice, language=language, sample_rate=sample_rate)
            try:
                async for chunk in stream:
                    size += len(chunk)
                    if size > MAX_SPEECH_BYTES:
                        raise PayloadTooLarge("The synthesized speech is longer than this route returns.")
                    chunks.append(chunk)
            finally:
                await _aclose(stream)
    except TimeoutError as exc:
        raise VendorTimeout(f"Speech synthesis took longer than {limit_seconds:g} s.") from exc
    return b"".join(chunks)


async def _aclose(stream: object) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def parse_audio(data: bytes) -> Wav:
    if len(data) > MAX_AUDIO_BYTES:
        raise PayloadTooLarge(f"The audio file may be at most {MAX_AUDIO_BYTES:,} bytes.")
    try:
        wav = read_wav(data)
    except InvalidAudio as exc:
        raise UnsupportedMediaType(f"{exc} Send a PCM WAV file (8 or 16 bit, any sample rate).") from exc
    if wav.duration_seconds > MAX_AUDIO_SECONDS:
        raise PayloadTooLarge(
            f"The audio is {wav.duration_seconds:.1f} s long; at most {MAX_AUDIO_SECONDS:g} s are accepted."
        )
    return wav


def _segment(transcript: Transcript) -> SegmentOut:
    return SegmentOut(
        text=transcript.text,
        start_ms=transcript.start_ms,
        end_ms=transcript.end_ms,
        confidence=transcript.confidence,
        words=[
            WordOut(text=w.text, start_ms=w.start_ms, end_ms=w.end_ms, confidence=w.confidence)
            for w in transcript.words
        ],
    )


async def transcribe(
    engine: SttEngine,
    wav: Wav,
    *,
    language: str | None,
    phrases: Sequence[str] | None,
    limit_seconds: float,
) -> SttOut:
    """Feed the file through a stream as it would arrive live; the final transcripts are the segments."""
    finals: list[Transcript] = []
    try:
        with anyio.fail_after(limit_seconds):
            stream = await engine.open_stream(language, wav.sample_rate, phrases=phrases)
            try:
                step = wav.sample_rate * FEED_MS // 1000 * 2
                for offset in range(0, len(wav.pcm16), step):
                    stream.feed(wav.pcm16[offset : offset + step])
                await stream.finish()
                async for transcript in stream:
                    if transcript.is_final:
                        finals.append(transcript)
            finally:
                await stream.aclose()
    except TimeoutError as exc:
        raise VendorTimeout(f"Speech recognition took longer than {limit_seconds:g} s.") from exc
    return SttOut(
        text=" ".join(t.text for t in finals).strip(),
        segments=[_segment(t) for t in finals],
        duration_seconds=round(wav.duration_seconds, 3),
        provider=engine.name,
        language=language,
    )


def as_wav(pcm16: bytes, sample_rate: int) -> bytes:
    return write_wav(pcm16, sample_rate)
