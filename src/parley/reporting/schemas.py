from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class SignalCount(BaseModel):
    type: str
    count: int


class OutcomeCounts(BaseModel):
    completed: int = 0
    transferred: int = 0
    abandoned: int = 0
    failed: int = 0


class DaySummary(BaseModel):
    day: str = Field(examples=["2026-03-02"], description="Calendar day in the organization's time zone.")
    calls: int
    minutes: float = Field(description="Call durations, each rounded up to the second, in minutes.")
    outcomes: OutcomeCounts
    mean_voice_latency_ms: float | None = Field(
        description="Over all voice turns; null when there were none."
    )
    p95_voice_latency_ms: float | None
    voice_calls: int = Field(default=0, description="Calls with speech (voice and phone) that day.")
    tts_characters: int | None = Field(
        default=None, description="Characters sent to speech synthesis; null when no call had voice."
    )
    stt_seconds: float | None = Field(
        default=None, description="Seconds of caller audio sent to recognition; null when no call had voice."
    )
    top_signals: list[SignalCount] = Field(description="The most frequent brain signal types (up to 5).")


class CallsSummaryOut(BaseModel):
    since: datetime
    until: datetime
    flow_id: str | None
    timezone: str
    days: list[DaySummary] = Field(description="Days with calls, oldest first.")
