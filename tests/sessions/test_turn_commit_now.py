"""A turn that goes on is committed with its audit event in one transaction on the driver
(``kit.db.commit_now``: SQLite's inline writer, PostgreSQL's pooled writer), on a database whose writes
commit as under ``parley serve``. What is stored must be what the usual way stores, and a turn refused
because its session changed meanwhile must leave nothing behind, its audit event included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.routing import Route

from parley.kit.db import Database, unit_of_work
from tests.conftest import auth, committed_app
from tests.kit.test_read_first import Counts
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.sessions.conftest import Platform
from tests.sessions.test_turn_write import FLOW, Meanwhile

LOOP: dict[str, Any] = {
    "language": "en",
    "variables": {},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "Go on.", "next": "tell"},
        {"id": "tell", "type": "say", "text": "You said {{ q }}.", "next": "ask"},
    ],
}


@pytest.fixture(scope="module")
def meanwhile() -> Iterator[tuple[Meanwhile, str]]:
    upstream = Meanwhile()
    with serve_in_thread(Starlette(routes=[Route("/order", upstream.answer)])) as url:
        yield upstream, url


@pytest.fixture
async def committed(tmp_path: Path, committed_url: str) -> AsyncIterator[tuple[Platform, Database]]:
    """The app on its own committed database (row readers and writers included), 127.0.0.1 allowed."""
    async with committed_app(tmp_path, committed_url, outbound_allowlist=["127.0.0.1"]) as (
        client,
        database,
        app,
    ):
        org = str((await create_org(client))["id"])
        yield Platform(client, auth(ALICE, org), org, app), database


async def _audit(database: Database, session_id: str) -> list[dict[str, Any]]:
    async with unit_of_work(database, write=False) as session:
        rows = await session.execute(
            text(
                "SELECT organization_id, actor_type, actor_id, action, resource_type, resource_id, method, "
                "path FROM audit_events WHERE path LIKE :path ORDER BY created_at, id"
            ),
            {"path": f"/api/sessions/{session_id}%"},
        )
        return [dict(row._mapping) for row in rows]


async def _version(database: Database, session_id: str) -> int:
    async with unit_of_work(database, write=False) as session:
        found = await session.scalar(
            text("SELECT version FROM conversation_sessions WHERE id = :id"), {"id": session_id}
        )
        return int(found)


async def test_a_turn_is_written_with_its_audit_event_without_an_orm_session(
    committed: tuple[Platform, Database],
) -> None:
    platform, database = committed
    flow_id = await platform.flow(LOOP)
    session_id = str((await platform.start(flow_id))["id"])
    for word in ("one", "two"):  # statements are compiled for the driver at their second use
        assert f"You said {word}." in (await platform.say(session_id, word))["reply"]

    with Counts(database) as counts:
        turn = await platform.say(session_id, "three")
    assert turn["reply"].startswith("You said three.") and turn["status"] == "active"
    # Read beside the turn and written by the driver: no ORM statement at all, and on SQLite (its own
    # inline connections) no connection of the pool either.
    assert counts.orm_statements == 0
    if database.inline_writer is not None:
        assert counts.checkouts == 0

    shown = (await platform.get(f"/api/sessions/{session_id}")).json()
    assert [t["text"] for t in shown["transcript"] if t["speaker"] == "caller"] == ["one", "two", "three"]
    assert await _version(database, session_id) == 4
    events = await _audit(database, session_id)
    assert len(events) == 3
    assert events[-1] == {
        "organization_id": platform.org,
        "actor_type": "user",
        "actor_id": events[0]["actor_id"],
        "action": "send_session_message",
        "resource_type": "session",
        "resource_id": session_id,
        "method": "POST",
        "path": f"/api/sessions/{session_id}/messages",
    }


async def test_an_opening_with_no_subscriber_is_written_with_its_audit_event_without_an_orm_session(
    committed: tuple[Platform, Database],
) -> None:
    platform, database = committed
    flow_id = await platform.flow(LOOP)
    for _ in range(2):  # caches filled, statements compiled for the driver at their second use
        await platform.start(flow_id)
    with Counts(database) as counts:
        opened = await platform.start(flow_id)
    assert counts.orm_statements == 0
    if database.inline_writer is not None:
        assert counts.checkouts == 0
    shown = await platform.get(f"/api/sessions/{opened['id']}")
    assert shown.status_code == 200 and shown.json()["status"] == "active"
    async with unit_of_work(database, write=False) as session:
        found = await session.execute(
            text(
                "SELECT action, resource_type, organization_id, details FROM audit_events WHERE resource_id = :id"
            ),
            {"id": opened["id"]},
        )
        events = [dict(row._mapping) for row in found]
    assert len(events) == 1
    assert events[0]["action"] == "create_session" and events[0]["resource_type"] == "session"
    assert events[0]["organization_id"] == platform.org
    details = events[0]["details"]
    if isinstance(details, str):  # SQLite hands JSON back as text through a plain text() query
        details = json.loads(details)
    assert details == {"flow_id": flow_id, "channel": "web"}


async def test_a_turn_refused_because_its_session_changed_leaves_no_audit_event(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    platform, database = committed
    upstream, url = meanwhile
    await platform.tool(
        {"name": "upstream", "type": "http", "config": {"method": "GET", "url": f"{url}/order"}}
    )
    flow_id = await platform.flow(FLOW)
    session_id = str((await platform.start(flow_id))["id"])
    for _ in range(2):  # compiled for the driver at the second use
        assert "It is ready." in (await platform.say(session_id, "my order"))["reply"]
    before = await _version(database, session_id)

    async def change() -> None:
        async with unit_of_work(database) as session:
            await session.execute(
                text("UPDATE conversation_sessions SET version = version + 1 WHERE id = :id"),
                {"id": session_id},
            )

    upstream.loop = asyncio.get_running_loop()
    upstream.change = change
    refused = await platform.post(f"/api/sessions/{session_id}/messages", {"text": "again"})
    assert refused.status_code == 409, refused.text
    assert await _version(database, session_id) == before + 1  # the other write only
    assert len(await _audit(database, session_id)) == 2  # the two turns that were written

    retried = await platform.say(session_id, "again")
    assert "It is ready." in retried["reply"]
    assert len(await _audit(database, session_id)) == 3


async def test_a_turn_by_api_key_commits_the_keys_use_with_it(committed: tuple[Platform, Database]) -> None:
    # Authentication noted the key's use: the turn goes the usual way and both are kept.
    platform, database = committed
    created = await platform.post("/api/api-keys", {"name": "agent", "scopes": ["write"]})
    assert created.status_code == 200, created.text
    key = created.json()["secret"]
    flow_id = await platform.flow(LOOP)
    by_key = Platform(platform.client, {"Authorization": f"Bearer {key}"}, platform.org, platform.app)
    session_id = str((await by_key.start(flow_id))["id"])
    for word in ("one", "two", "three"):
        assert f"You said {word}." in (await by_key.say(session_id, word))["reply"]
    assert await _version(database, session_id) == 4
    events = await _audit(database, session_id)
    assert [e["action"] for e in events] == ["send_session_message"] * 3
    assert {e["actor_type"] for e in events} == {"api_key"}
    async with unit_of_work(database, write=False) as session:
        used = await session.scalar(
            text("SELECT last_used_at FROM api_keys WHERE id = :id"), {"id": created.json()["id"]}
        )
    assert used is not None
