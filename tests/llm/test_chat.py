"""POST /api/llm/chat against a local OpenAI-compatible server speaking the real protocol."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from parley.llm.models import LLMUsage
from tests import migrated
from tests.conftest import JWT_SECRET, auth, make_token
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, BOB, create_org
from tests.stubs.openai import StubState, make_openai_stub


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[str, StubState]]:
    state = StubState(slow_seconds=2.0)
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@pytest.fixture
async def llm_client(
    settings: Settings, database: Database, stub: tuple[str, StubState]
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.llm_timeout = 1.0
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        org = await create_org(client)
        headers = auth(ALICE, str(org["id"]))
        yield client, headers


async def configure(
    client: httpx.AsyncClient, headers: dict[str, str], base_url: str, model: str = "stub-model"
) -> None:
    response = await client.put(
        "/api/providers/openai/config",
        json={"api_key": "sk-test-stub-key", "base_url": f"{base_url}/v1", "model": model},
        headers=headers,
    )
    assert response.status_code == 200, response.text


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        parsed.append((lines["event"], json.loads(lines["data"])))
    return parsed


async def test_no_provider_names_what_to_configure(
    llm_client: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    client, headers = llm_client
    response = await client.post(
        "/api/llm/chat", json={"messages": [{"role": "user", "content": "Hi"}]}, headers=headers
    )
    assert response.status_code == 409
    assert response.json()["code"] == "provider_not_configured"
    assert "PUT /api/providers/openai/config" in response.json()["detail"]


async def test_chat_answers_and_records_usage(
    llm_client: tuple[httpx.AsyncClient, dict[str, str]],
    stub: tuple[str, StubState],
    db_session: AsyncSession,
) -> None:
    client, headers = llm_client
    await configure(client, headers, stub[0])
    response = await client.post(
        "/api/llm/chat",
        json={
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Wo ist mein Auto?"},
            ],
            "temperature": 0.2,
            "max_tokens": 50,
        },
        headers=headers,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message"] == {
        "role": "assistant",
        "content": "You said: Wo ist mein Auto?",
        "tool_calls": [],
    }
    assert body["finish_reason"] == "stop" and body["model"] == "stub-model"
    assert (
        body["usage"]["total_tokens"]
        == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        > 0
    )
    sent = stub[1].requests[-1]
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 50 and sent["stream"] is False
    rows = (await db_session.scalars(select(LLMUsage))).all()
    assert [(r.model, r.prompt_tokens, r.completion_tokens) for r in rows] == [
        ("stub-model", body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"])
    ]


async def test_tool_calls_come_back(
    llm_client: tuple[httpx.AsyncClient, dict[str, str]], stub: tuple[str, StubState]
) -> None:
    client, headers = llm_client
    await configure(client, headers, stub[0])
    tools = [{"type": "function", "function": {"name": "order_lookup", "parameters": {"type": "object"}}}]
    payload = {"messages": [{"role": "user", "content": "my order is 4711"}], "tools": tools}
    body = (await client.post("/api/llm/chat", json=payload, headers=headers)).json()
    assert body["finish_reason"] == "tool_calls"
    assert body["message"]["tool_calls"][0]["function"] == {
        "name": "order_lookup",
        "arguments": '{"order_id": 4711}',
    }

    streamed = await client.post("/api/llm/chat", json={**payload, "stream": True}, headers=headers)
    done = events(streamed.text)[-1]
    assert done[0] == "done"
    assert done[1]["tool_calls"][0]["function"] == {"name": "order_lookup", "arguments": '{"order_id": 4711}'}


async def test_streaming_as_server_sent_events(
    llm_client: tuple[httpx.AsyncClient, dict[str, str]],
    stub: tuple[str, StubState],
    db_session: AsyncSession,
) -> None:
    client, headers = llm_client
    await configure(client, headers, stub[0])
    response = await client.post(
        "/api/llm/chat",
        json={"messages": [{"role": "user", "content": "one two three"}], "stream": True},
        headers=headers,
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    parsed = events(response.text)
    assert "".join(d["content"] for kind, d in parsed if kind == "delta").strip() == "You said: one two three"
    kind, done = parsed[-1]
    assert kind == "done" and done["finish_reason"] == "stop" and done["usage"]["completion_tokens"] > 0
    assert stub[1].requests[-1]["stream_options"] == {"include_usage": True}
    rows = (await db_session.scalars(select(LLMUsage))).all()
    assert [r.completion_tokens for r in rows] == [done["usage"]["completion_tokens"]]


@pytest.mark.parametrize(
    ("model", "status", "fragment"),
    [
        ("error-500", 502, "answered 500: stub failure 500"),
        ("error-429", 502, "answered 429"),
        ("garbage", 502, "not a valid chat completion"),
        ("stall", 504, "did not answer in time"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_failures_are_clear(
    llm_client: tuple[httpx.AsyncClient, dict[str, str]],
    stub: tuple[str, StubState],
    model: str,
    status: int,
    fragment: str,
    stream: bool,
) -> None:
    client, headers = llm_client
    await configure(client, headers, stub[0], model=model)
    response = await client.post(
        "/api/llm/chat",
        json={"messages": [{"role": "user", "content": "hi"}], "stream": stream},
        headers=headers,
    )
    if stream and model == "garbage":
        # A 200 that is not an event stream ends without events: the client gets a clean, empty done.
        assert response.status_code == 200
        return
    assert response.status_code == status, response.text
    assert fragment in response.json()["detail"]


async def test_viewers_cannot_chat(llm_client: tuple[httpx.AsyncClient, dict[str, str]]) -> None:
    client, headers = llm_client
    org_id = headers["X-Organization-Id"]
    await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=auth(ALICE)
    )
    response = await client.post(
        "/api/llm/chat", json={"messages": [{"role": "user", "content": "hi"}]}, headers=auth(BOB, org_id)
    )
    assert response.status_code == 403


async def test_provider_urls_pass_the_ssrf_guard(
    settings: Settings, database: Database, stub: tuple[str, StubState]
) -> None:
    settings.outbound_allowlist = []
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        org = await create_org(client)
        headers = auth(ALICE, str(org["id"]))
        await configure(client, headers, stub[0])
        response = await client.post(
            "/api/llm/chat", json={"messages": [{"role": "user", "content": "hi"}]}, headers=headers
        )
    assert response.status_code == 502
    assert "non-public address" in response.json()["detail"]


def test_a_client_that_disconnects_cancels_the_upstream_call(
    tmp_path: Path, stub: tuple[str, StubState]
) -> None:
    url = migrated.sqlite_url(tmp_path / "p.db")
    app = create_app(
        Settings(
            data_dir=tmp_path,
            database_url=url,
            auth_jwt_secret=JWT_SECRET,
            outbound_allowlist=["127.0.0.1"],  # type: ignore[arg-type]
            log_json=False,
        )
    )
    state = stub[1]
    abandoned_before = state.abandoned_streams
    with serve_in_thread(app) as base:
        token = make_token("streamer")
        org = httpx.post(f"{base}/api/organizations", json={"name": "S"}, headers=auth(token)).json()
        headers = auth(token, org["id"])
        httpx.put(
            f"{base}/api/providers/openai/config",
            headers=headers,
            json={"api_key": "sk-test-stub-key", "base_url": f"{stub[0]}/v1", "model": "slow"},
        ).raise_for_status()
        words = " ".join(f"w{i}" for i in range(40))
        with httpx.stream(
            "POST",
            f"{base}/api/llm/chat",
            headers=headers,
            timeout=30,
            json={"messages": [{"role": "user", "content": words}], "stream": True},
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("event: delta"):
                    break  # the caller hangs up after the first words
        deadline = time.monotonic() + 20
        while state.abandoned_streams == abandoned_before and time.monotonic() < deadline:
            time.sleep(0.05)
    assert state.abandoned_streams == abandoned_before + 1
