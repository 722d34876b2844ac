from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from parley.kit.schemas import StrictModel

SampleRate = Literal[8000, 16000, 22050, 24000]
LanguageTag = Field(
    default=None,
    pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})?$",
    description="Language, e.g. en, en-US, de.",
    examples=["en"],
)


class TtsIn(StrictModel):
    text: str = Field(min_length=1, max_length=2000, description="What to say (at most 2000 characters).")
    provider: str | None = Field(
        default=None,
        min_length=1,
        max_length=40,
        description="Text-to-speech provider key (espeak, elevenlabs, openai_tts); default: the "
        "organization's configured one, else eSpeak NG.",
    )
    voice: str | None = Field(
        default=None,
        min_length=1,
        max_length=80,
        pattern=r"^[A-Za-z0-9_.+-]+$",
        description="Provider voice (eSpeak: en-us, en, de...; ElevenLabs: a voice id).",
    )
    language: str | None = LanguageTag
    format: Literal["wav", "pcm16"] = Field(
        default="wav", description="wav: a WAV file; pcm16: raw 16-bit little-endian mono samples."
    )
    sample_rate: SampleRate = Field(default=16000, description="Output sample rate in Hz.")


class WordOut(BaseModel):
    text: str
    start_ms: int
    end_ms: int
    confidence: float | None = None


class SegmentOut(BaseModel):
    text: str
    start_ms: int
    end_ms: int
    confidence: float | None = None
    words: list[WordOut] = Field(default_factory=list)


class SttOut(BaseModel):
    text: str = Field(description="The whole transcript.")
    segments: list[SegmentOut] = Field(
        description="One per utterance, with times from the start of the file."
    )
    duration_seconds: float
    provider: str
    language: str | None = None
