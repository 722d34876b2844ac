"""A turn that goes on, and a turn that ends the conversation with nothing but its call record to
write, are committed with the audit event in one transaction on the driver (``kit.db.commit_now``:
SQLite's inline writer, PostgreSQL's pooled writer), on a database whose writes commit as under
``parley serve``. What is stored must be what the usual way stores, and a turn refused because its
session changed meanwhile must leave nothing behind, its audit event included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parley.kit import sqlite as sqlite_kit
from parley.kit.db import Database, unit_of_work
from parley.kit.jobs import runner_for
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


async def _received(_request: Request) -> Response:
    return Response(status_code=204)


@pytest.fixture(scope="module")
def meanwhile() -> Iterator[tuple[Meanwhile, str]]:
    upstream = Meanwhile()
    routes = [Route("/order", upstream.answer), Route("/hook", _received, methods=["POST"])]
    with serve_in_thread(Starlette(routes=routes)) as url:
        yield upstream, url


@pytest.fixture
async def committed(
    tmp_path: Path, committed_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Platform, Database]]:
    """The app on its own committed database (row readers and writers included), 127.0.0.1 allowed.

    SQLite's inline reader and writer hand work still running after 2 ms to the usual way (tested in
    tests/kit/test_sqlite_one_hop.py); on a loaded machine a preempted statement passes that budget,
    which these tests' counts of ORM statements and check-outs do not look at: it is raised here."""
    monkeypatch.setattr(sqlite_kit, "INLINE_BUDGET_S", 60.0)
    async with committed_app(tmp_path, committed_url, outbound_allowlist=["127.0.0.1"]) as (
        client,
        database,
        app,
    ):
        org = str((await create_org(client))["id"])
        yield Platform(client, auth(ALICE, org), org, app), database


async def _upstream_tool(platform: Platform, url: str) -> None:
    await platform.tool(
        {"name": "upstream", "type": "http", "config": {"method": "GET", "url": f"{url}/order"}}
    )


def _from_json(value: Any) -> Any:
    """A JSON column's value: SQLite hands it back as text through a plain text() query."""
    return json.loads(value) if isinstance(value, str) else value


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
    assert _from_json(events[0]["details"]) == {"flow_id": flow_id, "channel": "web"}


async def test_a_turn_refused_because_its_session_changed_leaves_no_audit_event(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    platform, database = committed
    upstream, url = meanwhile
    await _upstream_tool(platform, url)
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


# Ends at its second turn: "bye" says goodbye and ends the conversation.
ENDING: dict[str, Any] = {
    "language": "en",
    "variables": {},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "Go on.", "next": "tell"},
        {"id": "tell", "type": "say", "text": "You said {{ q }}.", "next": "last"},
        {"id": "last", "type": "collect", "variable": "r", "prompt": "Anything else?", "next": "bye"},
        {"id": "bye", "type": "end", "text": "Goodbye."},
    ],
}
# What differs from one conversation to the next in a stored call (its ids and times).
_VARIES = {"id", "session_id", "started_at", "ended_at", "created_at", "updated_at", "duration_seconds"}


async def _stored_call(database: Database, session_id: str) -> dict[str, Any]:
    async with unit_of_work(database, write=False) as session:
        rows = (
            await session.execute(text("SELECT * FROM calls WHERE session_id = :id"), {"id": session_id})
        ).all()
    assert len(rows) == 1, rows
    call = dict(rows[0]._mapping)
    for key, value in call.items():
        if isinstance(value, str) and value[:1] in "[{":
            call[key] = _from_json(value)
    return call


def _comparable(call: dict[str, Any]) -> dict[str, Any]:
    """A stored call without what differs between two runs of the same conversation: ids, times and
    measured milliseconds."""
    measured = {"at", "engine_ms", "tool_ms"}
    kept = {key: value for key, value in call.items() if key not in _VARIES}
    kept["variables"] = {k: v for k, v in kept["variables"].items() if k != "session_id"}
    for key in ("transcript", "turn_metrics"):
        kept[key] = [{k: v for k, v in item.items() if k not in measured} for item in kept[key]]
    return kept


async def _converse_to_the_end(platform: Platform, flow_id: str) -> tuple[str, dict[str, Any]]:
    session_id = str((await platform.start(flow_id))["id"])
    assert (await platform.say(session_id, "one"))["status"] == "active"
    ended = await platform.say(session_id, "nothing")
    return session_id, ended


async def test_an_ending_turn_is_written_with_its_call_and_audit_event_without_an_orm_session(
    committed: tuple[Platform, Database],
) -> None:
    platform, database = committed
    flow_id = await platform.flow(ENDING)
    # The first conversation ends the usual way (statements are compiled for the driver at their second
    # use); the third is written by the driver. Both must store the same call.
    first, _ = await _converse_to_the_end(platform, flow_id)
    await _converse_to_the_end(platform, flow_id)
    session_id = str((await platform.start(flow_id))["id"])
    await platform.say(session_id, "one")
    with Counts(database) as counts:
        ended = await platform.say(session_id, "nothing")
    assert ended["status"] == "ended" and ended["outcome"] == "completed" and ended["reply"] == "Goodbye."
    assert counts.orm_statements == 0
    if database.inline_writer is not None:
        assert counts.checkouts == 0

    by_driver, usual = await _stored_call(database, session_id), await _stored_call(database, first)
    assert _comparable(by_driver) == _comparable(usual)
    assert by_driver["turn_count"] == 6 and by_driver["outcome"] == "completed"
    assert by_driver["ended_event_pending"] in (False, 0)
    shown = (await platform.get(f"/api/sessions/{session_id}")).json()
    assert shown["status"] == "ended" and shown["ended_at"] is not None
    assert await _version(database, session_id) == 3
    events = await _audit(database, session_id)
    assert [e["action"] for e in events] == ["send_session_message"] * 2
    listed = await platform.get("/api/calls", params={"limit": 50})
    assert by_driver["id"] in [c["id"] for c in listed.json()["items"]]


async def test_an_ending_turn_with_a_call_ended_subscriber_writes_the_event_with_it_and_delivers_it(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    platform, database = committed
    _, url = meanwhile
    subscribed = await platform.post(
        "/api/webhooks/subscriptions",
        {"url": f"{url}/hook", "event_types": ["call.ended"], "secret": "s" * 24},
    )
    assert subscribed.status_code == 200, subscribed.text
    flow_id = await platform.flow(ENDING)
    for _ in range(2):
        await _converse_to_the_end(platform, flow_id)
    session_id = str((await platform.start(flow_id))["id"])
    await platform.say(session_id, "one")
    with Counts(database) as counts:
        ended = await platform.say(session_id, "nothing")
    assert ended["status"] == "ended"
    assert counts.orm_statements == 0  # the event and its delivery are written with the call
    call = await _stored_call(database, session_id)

    async def deliveries() -> list[tuple[str, str]]:
        async with unit_of_work(database, write=False) as session:
            found = await session.execute(
                text(
                    "SELECT d.status, e.data FROM webhook_deliveries d "
                    "JOIN webhook_events e ON e.id = d.event_id WHERE e.type = 'call.ended' "
                    "AND e.organization_id = :org"
                ),
                {"org": platform.org},
            )
            return [(status, data) for status, data in found]

    await runner_for(platform.app.state).drain()  # the delivery was queued after the commit
    mine = [status for status, data in await deliveries() if _from_json(data)["call_id"] == call["id"]]
    assert mine == ["delivered"]
    assert len(await _audit(database, session_id)) == 2


async def test_an_ending_turn_whose_session_turned_voice_meanwhile_records_the_voice_call(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    # A voice transport attached while the last turn's tool call was out (``mark_voice_connected``:
    # no new version). The call record must say so (its call.ended waits for the voice facts), as the
    # usual way, which reads the row as written, records it.
    platform, database = committed
    upstream, url = meanwhile
    await _upstream_tool(platform, url)
    flow = {
        **FLOW,
        "nodes": [*FLOW["nodes"][:2], {"id": "tell", "type": "end", "text": "It is done."}],
    }
    flow_id = await platform.flow(flow)
    for _ in range(2):  # compiled for the driver at the second use
        session_id = str((await platform.start(flow_id))["id"])
        assert (await platform.say(session_id, "my order"))["status"] == "ended"
        assert (await _stored_call(database, session_id))["ended_event_pending"] in (False, 0)

    session_id = str((await platform.start(flow_id))["id"])

    async def attach() -> None:
        async with unit_of_work(database) as session:
            await session.execute(
                text("UPDATE conversation_sessions SET voice_connected = :yes WHERE id = :id"),
                {"id": session_id, "yes": True},
            )

    upstream.loop = asyncio.get_running_loop()
    upstream.change = attach
    ended = await platform.say(session_id, "my order")
    assert ended["status"] == "ended" and ended["reply"] == "It is done."
    assert (await _stored_call(database, session_id))["ended_event_pending"] in (True, 1)
    assert len(await _audit(database, session_id)) == 1


async def _signal_setup(platform: Platform, url: str, *, throttle: int | None) -> str:
    """A notification rule for every signal to a webhook channel, a subscription to ``signal.raised``
    and ``call.ended``, and the ENDING flow (a caller who says "again" twice raises caller_repeats)."""
    channel = await platform.post(
        "/api/notifications/channels", {"name": "Ops", "type": "webhook", "url": f"{url}/hook"}
    )
    assert channel.status_code == 200, channel.text
    rule = {"signal_type": "*", "channel_id": channel.json()["id"], "throttle_minutes": throttle}
    made = await platform.post("/api/notifications/rules", rule)
    assert made.status_code == 200, made.text
    subscribed = await platform.post(
        "/api/webhooks/subscriptions",
        {"url": f"{url}/hook", "event_types": ["signal.raised", "call.ended"], "secret": "s" * 24},
    )
    assert subscribed.status_code == 200, subscribed.text
    return await platform.flow(ENDING)


async def _signals_of(database: Database, session_id: str) -> list[tuple[str, str, str]]:
    """Each signal of the session's call with its notification and its signal.raised delivery status."""
    async with unit_of_work(database, write=False) as session:
        rows = await session.execute(
            text(
                "SELECT s.id, s.type, n.status FROM brain_signals s JOIN calls c ON c.id = s.call_id "
                "JOIN notification_deliveries n ON n.signal_id = s.id WHERE c.session_id = :id"
            ),
            {"id": session_id},
        )
        signals = [(signal_id, kind, status) for signal_id, kind, status in rows]
        events = await session.execute(
            text(
                "SELECT e.data, d.status FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id "
                "WHERE e.type = 'signal.raised'"
            )
        )
        raised = {_from_json(data)["signal_id"]: status for data, status in events}
    return [(kind, status, raised.get(signal_id, "none")) for signal_id, kind, status in signals]


async def _repeating_caller(platform: Platform, flow_id: str) -> str:
    session_id = str((await platform.start(flow_id))["id"])
    await platform.say(session_id, "again")
    return session_id


async def test_an_ending_turn_that_raises_a_signal_writes_it_with_its_notification_and_event(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    platform, database = committed
    _, url = meanwhile
    flow_id = await _signal_setup(platform, url, throttle=None)
    for _ in range(2):  # compiled for the driver at the second use
        assert (await platform.say(await _repeating_caller(platform, flow_id), "again"))["status"] == "ended"
    session_id = await _repeating_caller(platform, flow_id)
    with Counts(database) as counts:
        ended = await platform.say(session_id, "again")
    assert ended["status"] == "ended"
    assert counts.orm_statements == 0
    await runner_for(platform.app.state).drain()
    assert await _signals_of(database, session_id) == [("caller_repeats", "delivered", "delivered")]
    assert (await _stored_call(database, session_id))["signal_types"] == ["caller_repeats"]
    assert len(await _audit(database, session_id)) == 2


async def test_an_ending_turn_whose_signal_meets_a_throttled_rule_goes_the_usual_way(
    committed: tuple[Platform, Database], meanwhile: tuple[Meanwhile, str]
) -> None:
    platform, database = committed
    _, url = meanwhile
    flow_id = await _signal_setup(platform, url, throttle=60)
    first = await _repeating_caller(platform, flow_id)
    await platform.say(first, "again")
    await runner_for(platform.app.state).drain()
    assert await _signals_of(database, first) == [("caller_repeats", "delivered", "delivered")]
    for _ in range(2):
        session_id = await _repeating_caller(platform, flow_id)
        with Counts(database) as counts:
            assert (await platform.say(session_id, "again"))["status"] == "ended"
        assert counts.orm_statements > 0  # the throttle is looked up in the writing transaction
    await runner_for(platform.app.state).drain()
    # Throttled: the signal is stored and sent to the subscribers, without a second notification.
    assert await _signals_of(database, session_id) == []
    assert (await _stored_call(database, session_id))["signal_types"] == ["caller_repeats"]
