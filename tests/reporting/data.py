"""A small set of calls (and LLM usage) whose figures the billing and reporting tests know."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from parley.kit.db import Database
from parley.kit.ids import new_id
from parley.llm.models import LLMUsage
from tests.calls.conftest import Recorder
from tests.calls.helpers import START

ANGRY = (("agent", "Guten Tag"), ("caller", "Ich bin verärgert, rufen Sie mich zurück!"))
RANGE = {"since": "2026-03-01T00:00:00Z", "until": "2026-05-01T00:00:00Z"}


async def seed(org: str, record: Recorder, database: Database) -> None:
    # 2026-03-02 (Berlin): a completed voice call (95.2 s -> 96 s) and an abandoned angry one (30 s).
    await record(org)
    await record(
        org,
        started_at=START + timedelta(hours=1),
        ended_at=START + timedelta(hours=1, seconds=30),
        lines=ANGRY,
        outcome="abandoned",
    )
    # 23:30 UTC is already 2026-03-03 in Berlin; a text call without voice latency.
    await record(
        org,
        started_at=datetime(2026, 3, 2, 23, 30, tzinfo=UTC),
        channel="web",
        turn_metrics=[],
        outcome="failed",
    )
    # April, another flow.
    await record(org, started_at=datetime(2026, 4, 1, 10, 0, tzinfo=UTC), flow_id="flow_01OTHER")
    # Outside the range.
    await record(org, started_at=datetime(2026, 2, 1, 10, 0, tzinfo=UTC))
    async with database.sessionmaker() as session:
        for at, source, prompt, completion in [
            (START + timedelta(hours=1), "chat", 100, 20),
            (START + timedelta(hours=1, minutes=5), "session", 420, 64),
            (datetime(2026, 4, 1, 11, 0, tzinfo=UTC), "session", 10, 5),
            (datetime(2026, 2, 1, 11, 0, tzinfo=UTC), "session", 999, 999),
        ]:
            session.add(
                LLMUsage(
                    id=new_id("llmu"),
                    organization_id=org,
                    provider="openai",
                    model="gpt-test",
                    source=source,
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    created_at=at,
                    updated_at=at,
                )
            )
        await session.commit()
