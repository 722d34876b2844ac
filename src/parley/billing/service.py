"""Usage per period. Calls give minutes, TTS characters and STT seconds; LLM tokens come only from
``llm_usage`` rows (chat and sessions both write them), so a session's tokens are never counted twice.
Figures are summed in Python over the period's rows: the same on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.billing.schemas import UsageFigures, UsageOut, UsagePeriod
from parley.calls.models import Call
from parley.llm.models import LLMUsage
from parley.reporting.periods import Granularity, organization_zone, period_of


class _Tally:
    def __init__(self) -> None:
        self.calls = 0
        self.billed_seconds = 0
        self.prompt = 0
        self.completion = 0
        self.voice_calls = 0
        self.tts = 0
        self.stt = 0.0

    def figures(self) -> UsageFigures:
        return UsageFigures(
            calls=self.calls,
            billed_seconds=self.billed_seconds,
            minutes=round(self.billed_seconds / 60, 2),
            llm_prompt_tokens=self.prompt,
            llm_completion_tokens=self.completion,
            voice_calls=self.voice_calls,
            tts_characters=self.tts,
            stt_seconds=round(self.stt, 3),
        )


async def usage(
    session: AsyncSession, organization_id: str, since: datetime, until: datetime, granularity: Granularity
) -> UsageOut:
    zone = await organization_zone(session, organization_id)
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    total = _Tally()
    calls = await session.execute(
        select(Call.started_at, Call.duration_seconds, Call.tts_characters, Call.stt_seconds).where(
            Call.organization_id == organization_id, Call.started_at >= since, Call.started_at < until
        )
    )
    for started_at, duration, tts, stt in calls:
        seconds = math.ceil(duration)
        for tally in (tallies[period_of(started_at, zone, granularity)], total):
            tally.calls += 1
            tally.billed_seconds += seconds
            if tts is not None or stt is not None:  # a voice call: its speech was measured
                tally.voice_calls += 1
                tally.tts += tts or 0
                tally.stt += stt or 0.0
    tokens = await session.execute(
        select(LLMUsage.created_at, LLMUsage.prompt_tokens, LLMUsage.completion_tokens).where(
            LLMUsage.organization_id == organization_id,
            LLMUsage.created_at >= since,
            LLMUsage.created_at < until,
        )
    )
    for created_at, prompt, completion in tokens:
        for tally in (tallies[period_of(created_at, zone, granularity)], total):
            tally.prompt += prompt
            tally.completion += completion
    return UsageOut(
        since=since,
        until=until,
        granularity=granularity,
        timezone=zone.key,
        periods=[UsagePeriod(period=p, **tallies[p].figures().model_dump()) for p in sorted(tallies)],
        totals=total.figures(),
    )
