"""The LLM sentiment classifier: record_call queues it after the commit, the real job runner runs it
against a local OpenAI-compatible server, and the signal shows through the HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.app import create_app
from parley.brain.sentiment import MIN_CONFIDENCE, SENTIMENT_JOB, caller_text, parse_verdict
from parley.calls.service import record_call
from parley.config import Settings
from parley.kit.db import Database
from parley.kit.jobs import runner_for
from parley.llm.models import LLMUsage
from tests.calls.helpers import make_record
from tests.conftest import auth
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.openai import StubState, make_openai_stub


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[str, StubState]]:
    state = StubState(slow_seconds=2.0)
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@dataclass
class Org:
    client: httpx.AsyncClient
    app: Any
    database: Database
    headers: dict[str, str]
    id: str
    stub_url: str
    stub: StubState

    async def configure(self, model: str = "stub-model") -> None:
        response = await self.client.put(
            "/api/providers/openai/config",
            json={"api_key": "sk-test-stub-key", "base_url": f"{self.stub_url}/v1", "model": model},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text

    async def record(self, *caller_lines: str, **overrides: Any) -> str:
        """Record a call the way a request does (commit, then the after-commit callbacks) and let
        the job runner finish."""
        lines = [("agent", "Guten Tag, wie kann ich helfen?")]
        for text in caller_lines:
            lines += [("caller", text), ("agent", "Das verstehe ich.")]
        runner = runner_for(self.app.state)
        async with self.database.write_sessionmaker() as session:
            call = await record_call(session, make_record(self.id, lines=lines, **overrides), jobs=runner)
            await session.commit()
            for callback in session.info.pop("after_commit", []):
                await callback()
        await runner.drain()
        return call.id

    async def signals(self, call_id: str) -> list[dict[str, Any]]:
        response = await self.client.get(
            "/api/brain/signals",
            params={"call_id": call_id, "type": "negative_sentiment"},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        return list(response.json()["items"])

    async def call(self, call_id: str) -> dict[str, Any]:
        response = await self.client.get(f"/api/calls/{call_id}", headers=self.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture
async def org(settings: Settings, database: Database, stub: tuple[str, StubState]) -> AsyncIterator[Org]:
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.llm_timeout = 1.0
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        created = await create_org(client)
        yield Org(client, app, database, auth(ALICE, str(created["id"])), str(created["id"]), *stub)
        runner = runner_for(app.state)
        await runner.drain()
        await runner.stop()


async def _usage(session: AsyncSession, organization_id: str) -> list[LLMUsage]:
    rows = await session.scalars(
        select(LLMUsage).where(LLMUsage.organization_id == organization_id, LLMUsage.source == "sentiment")
    )
    return list(rows)


# --- the classifier through the job runner ------------------------------------------------------


async def test_a_negative_call_raises_the_signal_and_records_usage(
    org: Org, db_session: AsyncSession
) -> None:
    await org.configure()
    before = len(org.stub.requests)
    call_id = await org.record(
        "Ich habe echt die Nase voll, seit drei Wochen warte ich auf meine Bestellung."
    )
    [signal] = await org.signals(call_id)
    assert (signal["source"], signal["severity"], signal["status"]) == ("rule", "medium", "open")
    assert signal["details"] == {
        "method": "llm",
        "confidence": 0.9,
        "reason": "The caller is clearly upset.",
    }
    call = await org.call(call_id)
    assert call["signal_types"] == ["negative_sentiment"]
    assert [s["id"] for s in call["signals"]] == [signal["id"]]
    listed = await org.client.get("/api/calls", params={"has_signal": "true"}, headers=org.headers)
    assert [c["id"] for c in listed.json()["items"]] == [call_id]
    # The provider saw the caller's turns only, with the JSON-output instructions.
    request = org.stub.requests[before]
    assert request["model"] == "stub-model"
    system, user = request["messages"]
    assert '"sentiment"' in system["content"] and "Anrufer" in system["content"]
    assert "Nase voll" in user["content"] and "Das verstehe ich" not in user["content"]
    [usage] = await _usage(db_session, org.id)
    assert (usage.provider, usage.model, usage.actor_id) == ("openai", "stub-model", None)
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0


async def test_a_neutral_call_raises_nothing_but_records_usage(org: Org, db_session: AsyncSession) -> None:
    await org.configure()
    call_id = await org.record("Wo ist meine Bestellung A-1001?", "Prima, danke schön.")
    assert await org.signals(call_id) == []
    call = await org.call(call_id)
    assert (call["signal_types"], call["signals"]) == ([], [])
    assert len(await _usage(db_session, org.id)) == 1


async def test_low_confidence_is_not_enough(org: Org, db_session: AsyncSession) -> None:
    await org.configure()
    # The stub answers negative with confidence 0.5 for "a bit impatient".
    quiet = await org.record("I'm a bit impatient, where is my parcel?")
    assert await org.signals(quiet) == []
    annoyed = await org.record("I'm annoyed and a bit impatient.")
    [signal] = await org.signals(annoyed)
    assert signal["details"]["method"] == "keywords"
    assert len(await _usage(db_session, org.id)) == 2


async def test_the_keyword_signal_is_upgraded_not_duplicated(org: Org) -> None:
    await org.configure()
    call_id = await org.record("Das ist doch unverschämt!", "I am furious about this.")
    [signal] = await org.signals(call_id)
    assert signal["details"]["method"] == "llm"
    assert signal["details"]["confidence"] == 0.9
    assert signal["details"]["keyword_turns"] == [
        {"turn_index": 1, "matched": ["unverschämt"]},
        {"turn_index": 3, "matched": ["furious"]},
    ]
    call = await org.call(call_id)
    assert call["signal_types"] == ["negative_sentiment"]
    # Running the job again (a retry) changes nothing.
    runner = runner_for(org.app.state)
    runner.enqueue(SENTIMENT_JOB, {"call_id": call_id})
    await runner.drain()
    assert [s["id"] for s in await org.signals(call_id)] == [signal["id"]]


async def test_a_fenced_german_answer_is_understood(org: Org) -> None:
    await org.configure()
    call_id = await org.record("Frechheit, das ist unverschämt.")
    [signal] = await org.signals(call_id)
    assert signal["details"]["method"] == "llm"
    assert signal["details"]["confidence"] == 0.85
    assert signal["details"]["reason"] == "Der Anrufer ist verärgert."


@pytest.mark.parametrize("model", ["error-500", "garbage", "stall"])
async def test_provider_failures_leave_the_keyword_result(
    org: Org, db_session: AsyncSession, model: str
) -> None:
    await org.configure(model)
    angry = await org.record("This is ridiculous, I am furious.")
    [signal] = await org.signals(angry)
    assert signal["details"] == {
        "turns": [{"turn_index": 1, "matched": ["furious", "ridiculous"]}],
        "method": "keywords",
    }
    fed_up = await org.record("I'm fed up with waiting.")
    assert await org.signals(fed_up) == []
    assert await _usage(db_session, org.id) == []


async def test_an_answer_that_is_not_json_changes_nothing(org: Org, db_session: AsyncSession) -> None:
    await org.configure()
    call_id = await org.record("gibberish, I'm fed up")
    # The stub answers with prose for "gibberish", even though "fed up" would be negative.
    assert await org.signals(call_id) == []
    assert len(await _usage(db_session, org.id)) == 1


async def test_without_a_provider_the_keyword_rule_alone_applies(org: Org) -> None:
    before = len(org.stub.requests)
    fed_up = await org.record("I'm fed up with waiting.")
    angry = await org.record("I am furious.")
    assert await org.signals(fed_up) == []
    [signal] = await org.signals(angry)
    assert signal["details"]["method"] == "keywords"
    assert len(org.stub.requests) == before


async def test_a_call_without_caller_turns_is_not_sent(org: Org) -> None:
    await org.configure()
    before = len(org.stub.requests)
    call_id = await org.record()
    assert await org.signals(call_id) == []
    assert len(org.stub.requests) == before


async def test_record_call_without_jobs_queues_nothing(org: Org, database: Database) -> None:
    await org.configure()
    before = len(org.stub.requests)
    async with database.write_sessionmaker() as session:
        await record_call(session, make_record(org.id, lines=[("caller", "I'm fed up.")]))
        assert "after_commit" not in session.info
        await session.commit()
    await runner_for(org.app.state).drain()
    assert len(org.stub.requests) == before


# --- parsing and the prompt's input -------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"sentiment": "negative", "confidence": 0.9, "reason": "angry"}', ("negative", 0.9, "angry")),
        ('Sure! ```json\n{"sentiment": "Neutral", "confidence": 1}\n```', ("neutral", 1.0, "")),
        ('{"sentiment": "positive", "confidence": 0, "reason": null}', ("positive", 0.0, "")),
    ],
)
def test_parse_verdict_reads_the_object(content: str, expected: tuple[str, float, str]) -> None:
    verdict = parse_verdict(content)
    assert verdict is not None
    assert (verdict.sentiment, verdict.confidence, verdict.reason) == expected


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "negative",
        "{not json}",
        "[1, 2]",
        '{"sentiment": "furious", "confidence": 0.9}',
        '{"sentiment": "negative"}',
        '{"sentiment": "negative", "confidence": "high"}',
        '{"sentiment": "negative", "confidence": 1.5}',
        '{"sentiment": "negative", "confidence": true}',
    ],
)
def test_parse_verdict_refuses_anything_else(content: str | None) -> None:
    assert parse_verdict(content) is None


def test_only_confident_negative_verdicts_count() -> None:
    strong = parse_verdict(f'{{"sentiment": "negative", "confidence": {MIN_CONFIDENCE}}}')
    weak = parse_verdict('{"sentiment": "negative", "confidence": 0.69}')
    assert strong is not None and strong.negative
    assert weak is not None and not weak.negative


def test_caller_text_keeps_the_newest_turns_of_a_long_call() -> None:
    transcript = [
        {"index": i, "speaker": "caller" if i % 2 else "agent", "text": f"turn {i} " + "x" * 900}
        for i in range(40)
    ]
    text = caller_text(transcript)
    assert len(text) <= 6000
    assert text.splitlines()[-1].startswith("[39] turn 39")
    assert "agent" not in text and "[0]" not in text
