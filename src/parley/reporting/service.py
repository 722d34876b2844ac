"""Per-day call summaries, computed in Python over the period's rows (same on both engines)."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.reporting.periods import organization_zone, period_of
from parley.reporting.schemas import CallsSummaryOut, DaySummary, OutcomeCounts, SignalCount

TOP_SIGNALS = 5


def p95(values: list[float]) -> float | None:
    """The nearest-rank 95th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class _Day:
    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0
        self.outcomes: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.signals: Counter[str] = Counter()
        self.voice_calls = 0
        self.tts = 0
        self.stt = 0.0

    def summary(self, day: str) -> DaySummary:
        return DaySummary(
            day=day,
            calls=self.calls,
            minutes=round(self.seconds / 60, 2),
            outcomes=OutcomeCounts(
                **{k: v for k, v in self.outcomes.items() if k in OutcomeCounts.model_fields}
            ),
            mean_voice_latency_ms=round(statistics.fmean(self.latencies), 1) if self.latencies else None,
            p95_voice_latency_ms=p95(self.latencies),
            voice_calls=self.voice_calls,
            tts_characters=self.tts if self.voice_calls else None,
            stt_seconds=round(self.stt, 3) if self.voice_calls else None,
            top_signals=[
                SignalCount(type=t, count=c)
                for t, c in sorted(self.signals.items(), key=lambda item: (-item[1], item[0]))[:TOP_SIGNALS]
            ],
        )


async def calls_summary(
    session: AsyncSession, organization_id: str, since: datetime, until: datetime, flow_id: str | None
) -> CallsSummaryOut:
    zone = await organization_zone(session, organization_id)
    conditions: list[Any] = [
        Call.organization_id == organization_id,
        Call.started_at >= since,
        Call.started_at < until,
    ]
    if flow_id is not None:
        conditions.append(Call.flow_id == flow_id)
    days: dict[str, _Day] = defaultdict(_Day)
    rows = await session.execute(
        select(
            Call.started_at,
            Call.duration_seconds,
            Call.outcome,
            Call.turn_metrics,
            Call.tts_characters,
            Call.stt_seconds,
        ).where(*conditions)
    )
    for started_at, duration, outcome, metrics, tts, stt in rows:
        day = days[period_of(started_at, zone, "day")]
        day.calls += 1
        day.seconds += math.ceil(duration)
        day.outcomes[outcome] += 1
        if tts is not None or stt is not None:  # a voice call: its speech was measured
            day.voice_calls += 1
            day.tts += tts or 0
            day.stt += stt or 0.0
        day.latencies += [
            float(m["voice_to_voice_ms"]) for m in metrics if m.get("voice_to_voice_ms") is not None
        ]
    signals = await session.execute(
        select(Call.started_at, BrainSignal.type)
        .join(BrainSignal, BrainSignal.call_id == Call.id)
        .where(*conditions, BrainSignal.organization_id == organization_id)
    )
    for started_at, type_ in signals:
        days[period_of(started_at, zone, "day")].signals[type_] += 1
    return CallsSummaryOut(
        since=since,
        until=until,
        flow_id=flow_id,
        timezone=zone.key,
        days=[days[d].summary(d) for d in sorted(days)],
    )


CSV_COLUMNS = (
    "day",
    "calls",
    "minutes",
    "completed",
    "transferred",
    "abandoned",
    "failed",
    "mean_voice_latency_ms",
    "p95_voice_latency_ms",
    "top_signals",
    "voice_calls",
    "tts_characters",
    "stt_seconds",
)


def to_csv(summary: CallsSummaryOut) -> str:
    """One row per day; ``top_signals`` as ``type:count`` pairs separated by ``;``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for day in summary.days:
        writer.writerow(
            [
                day.day,
                day.calls,
                day.minutes,
                day.outcomes.completed,
                day.outcomes.transferred,
                day.outcomes.abandoned,
                day.outcomes.failed,
                "" if day.mean_voice_latency_ms is None else day.mean_voice_latency_ms,
                "" if day.p95_voice_latency_ms is None else day.p95_voice_latency_ms,
                ";".join(f"{s.type}:{s.count}" for s in day.top_signals),
                day.voice_calls,
                "" if day.tts_characters is None else day.tts_characters,
                "" if day.stt_seconds is None else day.stt_seconds,
            ]
        )
    return buffer.getvalue()
