"""A turn's tools are kept per organization in the process (kit/orgcache.py, kind ``runtime.tools``,
``runtime.adapters.PlatformTools.preload``): a turn that hits the cache reads no ``tools`` row; a tool created,
changed or deleted through the API is seen by the next turn at once; another organization's tool of
the same name is never used. Run on SQLite and PostgreSQL (the ``database`` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from parley.kit.db import Database
from tests.live import serve_in_thread
from tests.privacy.test_settings_cache import statements
from tests.sessions.conftest import Platform, make_platform

__all__ = ["make_platform"]

MISSING = "Missing."
NO_TOOL = {
    "language": "en",
    "start_node": "ask",
    "nodes": [{"id": "ask", "type": "collect", "variable": "q", "prompt": "Ask.", "next": "ask"}],
}


async def _seen(request: Request) -> JSONResponse:
    # What the tool sent: its URL (from the tool's config) and its secret (a header).
    seen = f"{request.url.path}:{request.headers.get('x-key')}"
    return JSONResponse({"order": {"seen": seen}})


@pytest.fixture(scope="module")
def probe() -> Iterator[str]:
    """A local server that answers what the tool's request carried."""
    with serve_in_thread(Starlette(routes=[Route("/{path:path}", _seen)])) as url:
        yield url


def _flow(tool: str) -> dict[str, Any]:
    return {
        "language": "en",
        "variables": {"result": None},
        "start_node": "ask",
        "nodes": [
            {"id": "ask", "type": "collect", "variable": "q", "prompt": "Ask.", "next": "call"},
            {
                "id": "call",
                "type": "tool",
                "tool": tool,
                "arguments": {},
                "result_variable": "result",
                "on_error": "missing",
                "next": "saw",
            },
            {"id": "saw", "type": "say", "text": "Saw {{ result.order.seen }}.", "next": "ask"},
            {"id": "missing", "type": "say", "text": MISSING, "next": "ask"},
        ],
    }


def _tool(probe: str, path: str, key: str, name: str = "probe") -> dict[str, Any]:
    return {
        "name": name,
        "type": "http",
        "config": {"method": "GET", "url": f"{probe}/{path}", "headers": {"X-Key": "{{ secrets.key }}"}},
        "secrets": {"key": key},
    }


async def _turn(platform: Platform, session_id: str) -> str:
    return str((await platform.say(session_id, "go"))["reply"])


def _missing(reply: str) -> bool:
    """The flow's tool-error branch (after the engine's own apology), not a tool's answer."""
    return MISSING in reply and "Saw" not in reply


def _tool_reads(seen: list[str]) -> int:
    return sum(1 for s in seen if "FROM tools" in s)


async def _delete(platform: Platform, flow_id: str, tool_id: str) -> None:
    """Delete the tool the flow's published version calls (its draft no longer does, so it may go)."""
    updated = await platform.client.patch(
        f"/api/flows/{flow_id}", json={"definition": NO_TOOL}, headers=platform.headers
    )
    assert updated.status_code == 200, updated.text
    deleted = await platform.client.delete(f"/api/tools/{tool_id}", headers=platform.headers)
    assert deleted.status_code == 200, deleted.text


async def test_a_changed_config_or_secret_is_used_at_the_next_turn(
    make_platform: Any, probe: str, database: Database
) -> None:
    platform: Platform = await make_platform()
    tool = await platform.tool(_tool(probe, "one", "alpha"))
    flow_id = await platform.flow(_flow("probe"))
    first = await platform.start(flow_id)  # reads the tools, fills the cache
    second = await platform.start(flow_id)
    with statements(database) as seen:
        reply = await _turn(platform, first["id"])
    assert reply.startswith("Saw /one:alpha."), reply
    assert _tool_reads(seen) == 0, seen  # answered from the cache

    changed = await platform.client.patch(
        f"/api/tools/{tool['id']}",
        json={"config": {**_tool(probe, "two", "")["config"]}},
        headers=platform.headers,
    )
    assert changed.status_code == 200, changed.text
    assert (await _turn(platform, second["id"])).startswith("Saw /two:alpha.")

    rekeyed = await platform.client.patch(
        f"/api/tools/{tool['id']}", json={"secrets": {"key": "beta"}}, headers=platform.headers
    )
    assert rekeyed.status_code == 200, rekeyed.text
    assert (await _turn(platform, first["id"])).startswith("Saw /two:beta.")
    assert (await _turn(platform, second["id"])).startswith("Saw /two:beta.")


async def test_a_deleted_tool_is_the_tool_error_at_the_next_turn(make_platform: Any, probe: str) -> None:
    platform: Platform = await make_platform()
    tool = await platform.tool(_tool(probe, "one", "alpha"))
    flow_id = await platform.flow(_flow("probe"))
    opened = await platform.start(flow_id)
    assert (await _turn(platform, opened["id"])).startswith("Saw /one:alpha.")

    await _delete(platform, flow_id, tool["id"])

    turn = await platform.say(opened["id"], "go")
    assert _missing(turn["reply"]), turn["reply"]
    assert "does not exist" in turn["variables"]["result"]["error"]


async def test_a_tool_created_after_a_turn_that_lacked_it_is_found(make_platform: Any, probe: str) -> None:
    platform: Platform = await make_platform()
    tool = await platform.tool(_tool(probe, "one", "alpha"))
    flow_id = await platform.flow(_flow("probe"))
    await _delete(platform, flow_id, tool["id"])
    opened = await platform.start(flow_id)
    assert _missing(await _turn(platform, opened["id"]))  # "does not exist" is cached
    assert _missing(await _turn(platform, opened["id"]))
    await platform.tool(_tool(probe, "again", "gamma"))
    assert (await _turn(platform, opened["id"])).startswith("Saw /again:gamma.")


async def test_another_organizations_tool_of_the_same_name_is_never_used(
    make_platform: Any, probe: str
) -> None:
    ours: Platform = await make_platform()
    theirs: Platform = await make_platform()
    without: Platform = await make_platform()
    await ours.tool(_tool(probe, "ours", "k1"))
    await theirs.tool(_tool(probe, "theirs", "k2"))
    gone = await without.tool(_tool(probe, "gone", "k3"))
    flows = [await p.flow(_flow("probe")) for p in (ours, theirs, without)]
    await _delete(without, flows[2], gone["id"])
    sessions = [
        (p, (await p.start(flow_id))["id"]) for p, flow_id in zip((ours, theirs, without), flows, strict=True)
    ]
    for _ in range(2):  # the second round from the cache
        replies = [await _turn(p, session_id) for p, session_id in sessions]
        assert replies[0].startswith("Saw /ours:k1."), replies
        assert replies[1].startswith("Saw /theirs:k2."), replies
        assert _missing(replies[2]), replies
