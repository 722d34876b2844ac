"""Streamed turns: the model's text reaches the client as ``delta`` events while it is generated.

The DB-parametrized tests go through the ASGI transport (which hands over the whole stream at once,
so they check content and order of events); the live tests run the platform under uvicorn on a
migrated SQLite file and read the stream as it arrives, against the OpenAI-compatible stub.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from parley.app import create_app
from parley.calls.models import Call
from parley.config import Settings
from parley.sessions.chat import run_chat
from tests import migrated
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.sessions.conftest import Platform
from tests.sessions.test_router import _llm_flow, _llm_platform
from tests.stubs.openai import StubState, make_openai_stub

Event = tuple[str, dict[str, Any]]


def chat_flow() -> dict[str, Any]:
    """The llm flow of the router tests without tools (so it needs no connector)."""
    definition = _llm_flow()
    definition["nodes"][1]["tools"] = []
    return definition


def parse_events(text: str) -> list[Event]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def deltas(events: list[Event]) -> str:
    return "".join(data["text"] for name, data in events if name == "delta")


def llm_says(events: list[Event]) -> list[str]:
    return [data["text"] for name, data in events if name == "say" and data["node_id"] == "chat"]


async def stream_message(platform: Platform, session_id: str, text: str) -> list[Event]:
    response = await platform.post(
        f"/api/sessions/{session_id}/messages", {"text": text}, headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_events(response.text)


async def test_deltas_come_before_the_turn_events_and_make_up_the_reply(
    make_platform: Any,
    connector: dict[str, str],
    llm_stub: tuple[str, StubState],
    db_session: AsyncSession,
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "stub-model")
    session = await platform.start(await platform.flow(_llm_flow()))
    events = await stream_message(platform, session["id"], "hello there")
    names = [name for name, _ in events]
    assert names.count("delta") > 1 and names[-1] == "done"
    assert names.index("say") > max(i for i, name in enumerate(names) if name == "delta")
    assert deltas(events).strip() == "You said: hello there" == llm_says(events)[0]
    assert all(data["node_id"] == "chat" for name, data in events if name == "delta")
    assert events[-1][1]["reply"] == "You said: hello there" and events[-1][1]["waiting"] is True
    assert llm_stub[1].requests[-1]["stream"] is True

    # The JSON answer is unchanged, and both turns are in the session.
    turn = await platform.say(session["id"], "and now?")
    assert turn["reply"] == "You said: and now?" and "delta" not in {e["type"] for e in turn["events"]}
    stored = (await platform.get(f"/api/sessions/{session['id']}")).json()
    assert [t["text"] for t in stored["transcript"]][-4:] == [
        "hello there",
        "You said: hello there",
        "and now?",
        "You said: and now?",
    ]
    assert (await platform.post(f"/api/sessions/{session['id']}/end")).status_code == 200
    call = await db_session.scalar(select(Call).where(Call.session_id == session["id"]))
    assert call is not None
    llm_turns = [m for m in call.turn_metrics if m["llm_total_ms"] is not None]
    assert len(llm_turns) == 2
    for metrics in llm_turns:
        assert 0 < metrics["llm_first_token_ms"] <= metrics["llm_total_ms"]


async def test_a_tool_call_within_a_streamed_turn(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState]
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "stub-model")
    session = await platform.start(await platform.flow(_llm_flow()))
    events = await stream_message(platform, session["id"], "Where is my order 7?")
    names = [name for name, _ in events]
    assert names[-3:] == ["tool_call", "say", "done"]
    assert events[-3][1]["data"]["status"] == "ok"
    assert deltas(events).strip() == "You said: Where is my order 7?" == llm_says(events)[0]
    # The model got the tool's result before it answered.
    tool_messages = [m for m in llm_stub[1].requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages and '"id": 7' in tool_messages[0]["content"]


async def test_an_llm_failure_streams_the_fallback_line(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState]
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "error-500")
    session = await platform.start(await platform.flow(_llm_flow(model_next="bye")))
    events = await stream_message(platform, session["id"], "hello?")
    assert [name for name, _ in events] == ["say", "say", "end", "done"]
    assert [data["text"] for _, data in events[:2]] == ["Sorry, that did not work just now.", "Goodbye!"]
    assert events[-1][1]["outcome"] == "failed"


async def test_streamed_and_json_messages_to_one_session_stay_serialized(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState]
) -> None:
    platform = await _llm_platform(make_platform, connector, llm_stub, "stub-model")
    session = await platform.start(await platform.flow(chat_flow()))
    texts = [f"message {i}" for i in range(6)]

    async def send(index: int, text: str) -> str:
        if index % 2:
            return str((await platform.say(session["id"], text))["reply"])
        events = await stream_message(platform, session["id"], text)
        assert deltas(events).strip() == events[-1][1]["reply"]
        return str(events[-1][1]["reply"])

    replies = await asyncio.gather(*(send(i, text) for i, text in enumerate(texts)))
    assert replies == [f"You said: {text}" for text in texts]
    transcript = (await platform.get(f"/api/sessions/{session['id']}")).json()["transcript"]
    callers = [i for i, t in enumerate(transcript) if t["speaker"] == "caller"]
    assert sorted(transcript[i]["text"] for i in callers) == texts
    for index in callers:
        assert transcript[index + 1]["text"] == f"You said: {transcript[index]['text']}"


async def test_an_ended_or_unknown_session_is_a_status_not_a_stream(make_platform: Any) -> None:
    platform: Platform = await make_platform()
    headers = {"Accept": "text/event-stream"}
    unknown = await platform.post("/api/sessions/ses_nope/messages", {"text": "hi"}, headers=headers)
    assert unknown.status_code == 404
    session = await platform.start(await platform.flow(chat_flow()))
    assert (await platform.post(f"/api/sessions/{session['id']}/end")).status_code == 200
    ended = await platform.post(f"/api/sessions/{session['id']}/messages", {"text": "hi"}, headers=headers)
    assert ended.status_code == 409 and ended.json()["code"] == "session_ended"


# --- an upstream that breaks off in the middle of its answer -------------------------------------


def _broken_stub() -> Starlette:
    async def completions(request: Request) -> Response:
        body = await request.json()

        async def chunks() -> AsyncIterator[bytes]:
            for word in ("Half ", "an "):
                delta = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
                yield f"data: {json.dumps({'model': body['model'], **delta})}\n\n".encode()
            raise RuntimeError("the upstream breaks off mid-answer")

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@pytest.fixture(scope="module")
def broken_llm() -> Iterator[str]:
    with serve_in_thread(_broken_stub()) as url:
        yield url


async def test_an_answer_broken_off_mid_stream_says_the_fallback(
    make_platform: Any, connector: dict[str, str], broken_llm: str, db_session: AsyncSession
) -> None:
    platform = await _llm_platform(make_platform, connector, (broken_llm, StubState()), "stub-model")
    session = await platform.start(await platform.flow(_llm_flow()))
    events = await stream_message(platform, session["id"], "tell me everything")
    assert deltas(events) == "Half an "
    assert [name for name, _ in events][-4:] == ["delta", "say", "end", "done"]
    assert llm_says(events) == ["Sorry, that did not work just now."]
    assert (events[-1][1]["status"], events[-1][1]["outcome"]) == ("ended", "failed")
    call = await db_session.scalar(select(Call).where(Call.session_id == session["id"]))
    assert call is not None and call.outcome == "failed"
    assert call.end_reason == "llm_failure" and "llm_failure" in call.signal_types


# --- over real HTTP --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_stub() -> Iterator[tuple[str, StubState]]:
    state = StubState(slow_seconds=1.0)  # the slow model's words 0.1 s apart
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, slow_stub: tuple[str, StubState]
) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("streaming")
    url = migrated.sqlite_url(data_dir / "parley.db")
    app = create_app(
        Settings(
            data_dir=data_dir,
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            outbound_allowlist=["127.0.0.1"],
            rate_limit_per_minute=0,
            log_level="WARNING",
            log_json=False,
        )
    )
    with serve_in_thread(app) as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
        token = make_token("streamer", ttl=3600)
        org = client.post(
            "/api/organizations", json={"name": "Stream"}, headers={"Authorization": f"Bearer {token}"}
        )
        headers = {"Authorization": f"Bearer {token}", "X-Organization-Id": org.json()["id"]}
        configured = client.put(
            "/api/providers/openai/config",
            json={"api_key": "sk-test-stub-key", "base_url": f"{slow_stub[0]}/v1", "model": "slow"},
            headers=headers,
        )
        assert configured.status_code == 200, configured.text
        flow = client.post("/api/flows", json={"name": "Slow", "definition": chat_flow()}, headers=headers)
        assert client.post(f"/api/flows/{flow.json()['id']}/publish", headers=headers).status_code == 200
        yield {
            "base_url": base_url,
            "headers": headers,
            "flow_id": flow.json()["id"],
            "token": token,
            "org": org.json()["id"],
        }


async def _start(client: httpx.AsyncClient, live: dict[str, Any]) -> str:
    response = await client.post("/api/sessions", json={"flow_id": live["flow_id"]}, headers=live["headers"])
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def _read_events(response: httpx.Response) -> AsyncIterator[Event]:
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name, json.loads(line[6:])


async def test_the_first_delta_arrives_while_the_model_is_still_generating(
    live: dict[str, Any], slow_stub: tuple[str, StubState]
) -> None:
    state = slow_stub[1]
    async with httpx.AsyncClient(base_url=live["base_url"], timeout=30) as client:
        session_id = await _start(client, live)
        message = "one two three four five six seven eight"
        seen: list[Event] = []
        finished_when_first_delta: int | None = None
        before = state.completed_streams
        async with client.stream(
            "POST",
            f"/api/sessions/{session_id}/messages?stream=true",
            json={"text": message},
            headers=live["headers"],
        ) as response:
            assert response.status_code == 200
            async for event in _read_events(response):
                if event[0] == "delta" and finished_when_first_delta is None:
                    finished_when_first_delta = state.completed_streams
                seen.append(event)
    # The stub had not sent its last chunk when the client saw the first delta.
    assert finished_when_first_delta == before
    assert state.completed_streams == before + 1
    assert deltas(seen).strip() == f"You said: {message}" == llm_says(seen)[0]
    assert seen[-1][0] == "done"


async def test_a_client_that_leaves_mid_stream_does_not_lose_the_turn(
    live: dict[str, Any], slow_stub: tuple[str, StubState]
) -> None:
    state = slow_stub[1]
    async with httpx.AsyncClient(base_url=live["base_url"], timeout=30) as client:
        session_id = await _start(client, live)
        before = state.completed_streams
        async with client.stream(
            "POST",
            f"/api/sessions/{session_id}/messages",
            json={"text": "first words then gone"},
            headers={**live["headers"], "Accept": "text/event-stream"},
        ) as response:
            async for name, _ in _read_events(response):
                if name == "delta":
                    break  # leave after the first piece of text
        # The next message waits for the streamed turn to commit, then continues the conversation.
        after = await client.post(
            f"/api/sessions/{session_id}/messages", json={"text": "still there?"}, headers=live["headers"]
        )
        assert after.status_code == 200, after.text
        assert after.json()["reply"] == "You said: still there?"
        texts = [t["text"] for t in after.json()["transcript"]]
        assert texts[-4:] == [
            "first words then gone",
            "You said: first words then gone",
            "still there?",
            "You said: still there?",
        ]
    # The upstream answer was not cut off: the turn ran to its end.
    assert state.completed_streams == before + 2


def test_parley_chat_prints_the_model_text_once_as_it_streams(live: dict[str, Any]) -> None:
    console = Console(record=True, width=200, color_system=None)
    lines = iter(["how are you"])

    def read_line(prompt: str) -> str:
        line = next(lines, None)
        if line is None:
            raise EOFError
        return line

    code = run_chat(
        url=live["base_url"],
        token=live["token"],
        flow=live["flow_id"],
        org=live["org"],
        language=None,
        channel="web",
        console=console,
        read_line=read_line,
    )
    output = console.export_text()
    assert code == 0
    assert output.count("You said: how are you") == 1
    assert "agent › You said: how are you" in output
    # the EOF after one line ended an LLM flow that has no end of its own: the caller left
    assert output.strip().endswith("Session ended: abandoned.")
