"""A turn's tools come from the per-organization cache (kit/orgcache.py): a turn that hits it reads no
``tools`` row, a tool changed through the API is what the next turn runs, and each organization runs
its own tool (a tool a published flow uses cannot be renamed or deleted, nor a flow published that
names a missing tool: the API refuses both)."""

from __future__ import annotations

from typing import Any

from parley.kit.db import Database
from tests.privacy.test_settings_cache import statements
from tests.sessions.conftest import Platform

FLOW: dict[str, Any] = {
    "language": "en",
    "variables": {"result": None},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "What do you need?", "next": "call"},
        {
            "id": "call",
            "type": "tool",
            "tool": "lookup",
            "arguments": {},
            "result_variable": "result",
            "next": "tell",
            "on_error": "failed",
        },
        {"id": "tell", "type": "say", "text": "Answer: {{ result }}.", "next": "ask"},
        {"id": "failed", "type": "say", "text": "The lookup failed.", "next": "ask"},
    ],
}


def _http(url: str) -> dict[str, Any]:
    return {"name": "lookup", "type": "http", "config": {"method": "GET", "url": url}}


def _tool_reads(seen: list[str]) -> int:
    return sum(1 for statement in seen if "FROM tools" in statement)


async def test_a_turn_runs_the_tool_as_it_is_now_and_reads_no_tool_row_meanwhile(
    make_platform: Any, upstream: str, database: Database
) -> None:
    platform: Platform = await make_platform()
    tool = await platform.tool(_http(f"{upstream}/json"))
    session_id = str((await platform.start(await platform.flow(FLOW)))["id"])
    assert "fertig" in (await platform.say(session_id, "first"))["reply"]
    with statements(database) as seen:
        assert "fertig" in (await platform.say(session_id, "second"))["reply"]
    assert _tool_reads(seen) == 0, seen

    changed = await platform.client.patch(
        f"/api/tools/{tool['id']}",
        json={"config": {"method": "GET", "url": f"{upstream}/text"}},
        headers=platform.headers,
    )
    assert changed.status_code == 200, changed.text
    assert "this is not JSON at all" in (await platform.say(session_id, "third"))["reply"]


async def test_each_organization_runs_its_own_tool_of_the_same_name(
    make_platform: Any, upstream: str
) -> None:
    ours: Platform = await make_platform()
    theirs: Platform = await make_platform()
    await ours.tool(_http(f"{upstream}/text"))
    await theirs.tool(_http(f"{upstream}/json"))
    our_session = str((await ours.start(await ours.flow(FLOW)))["id"])
    their_session = str((await theirs.start(await theirs.flow(FLOW)))["id"])
    for word in ("first", "second"):  # the second turns come from each organization's cache entry
        assert "this is not JSON at all" in (await ours.say(our_session, word))["reply"]
        assert "fertig" in (await theirs.say(their_session, word))["reply"]
