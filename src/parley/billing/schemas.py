from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class UsageFigures(BaseModel):
    calls: int
    billed_seconds: int = Field(description="Call durations, each rounded up to the whole second.")
    minutes: float = Field(description="billed_seconds / 60, to two decimals.")
    llm_prompt_tokens: int = Field(description="From the LLM usage records (chat and sessions).")
    llm_completion_tokens: int
    voice_calls: int = Field(
        description="Calls with speech (voice and phone); text sessions have no speech usage."
    )
    tts_characters: int = Field(description="Characters sent to speech synthesis, summed over voice calls.")
    stt_seconds: float = Field(
        description="Seconds of caller audio sent to speech recognition, over voice calls."
    )


class UsagePeriod(UsageFigures):
    period: str = Field(
        examples=["2026-03-02", "2026-03"], description="Day or month, organization time zone."
    )


class UsageOut(BaseModel):
    since: datetime
    until: datetime
    granularity: str
    timezone: str
    periods: list[UsagePeriod] = Field(description="Periods with any usage, oldest first.")
    totals: UsageFigures
