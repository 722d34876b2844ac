"""A slow client or a stalled upstream of one tenant does not stop another tenant's writes, reads or
turns (issue 18, item 1), against a real server on SQLite and PostgreSQL.

Before the fix, a transaction (SQLite: the write lock; PostgreSQL: a pool connection) was held while a
body was read and while a tool's upstream answered: other tenants' writes then answered 503 after the
busy time-out, and on PostgreSQL 30 such requests emptied the pool (20 + 10 overflow). Every check here
is ordered by events, not by time: the other tenant is answered *while* the attack is still pending.
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from parley.sessions.locks import slots_per_organization
from tests.live import serve_in_thread
from tests.security.conftest import Live, new_org

ATTACKERS = 32  # more than the PostgreSQL pool (20 + 10 overflow) and than SQLite's one writer


@dataclass
class Stall:
    """An upstream that holds every request until released; counts the requests that reached it."""

    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    async def handle(self, request: Request) -> JSONResponse:
        self.arrived.release()
        while not self.release.is_set():  # the stub's own loop; the platform's is elsewhere
            await asyncio.sleep(0.05)
        return JSONResponse({"success": True, "order": {"project_status": "ready"}})

    async def wait_for(self, count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(self.arrived.acquire, True, 120), (
                f"the upstream was reached only {_} times"
            )


@pytest.fixture
def stall() -> Iterator[tuple[str, Stall]]:
    state = Stall()
    try:
        with serve_in_thread(Starlette(routes=[Route("/{rest:path}", state.handle)])) as url:
            yield url, state
    finally:
        state.release.set()


def _tool(name: str, url: str) -> dict[str, Any]:
    return {"name": name, "type": "http", "config": {"method": "GET", "url": url, "timeout_seconds": 30}}


async def _other_tenant_is_served(client: httpx.AsyncClient, bob: dict[str, str], label: str) -> None:
    created = await client.post(
        "/api/tools", json=_tool(f"bob_{label}", "https://example.com/x"), headers=bob
    )
    assert created.status_code == 200, created.text
    listed = await client.get("/api/tools", headers=bob)
    assert listed.status_code == 200, listed.text
    assert f"bob_{label}" in [t["name"] for t in listed.json()["items"]]
    assert (await client.get("/healthz")).status_code == 200


def _open_slow_bodies(url: str, headers: dict[str, str], count: int) -> list[socket.socket]:
    """Sockets that send a write request's headers and 13 of its 1,000 body bytes, then nothing."""
    parts = urlsplit(url)
    head = (
        "POST /api/tools HTTP/1.1\r\n"
        f"Host: {parts.netloc}\r\n"
        f"Authorization: {headers['Authorization']}\r\n"
        f"X-Organization-Id: {headers['X-Organization-Id']}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    ).encode()
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30)
        sock.sendall(head + b'{"name": "slo')
        sockets.append(sock)
    return sockets


def _answered(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


async def test_slow_bodies_do_not_stop_other_tenants(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=60) as client:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            mallory = new_org(http, "avail-body-mallory", "Mallory GmbH")
            bob = new_org(http, "avail-body-bob", "Bob KG")
        sockets = _open_slow_bodies(live.url, mallory, ATTACKERS)
        try:
            # One round trip after the last header: the server has taken up every slow request.
            assert (await client.get("/healthz")).status_code == 200
            for round_ in range(3):
                await _other_tenant_is_served(client, bob, f"body{round_}")
            # ... and the slow requests are still waiting for their bodies (not refused early).
            assert not any(_answered(sock) for sock in sockets)
        finally:
            for sock in sockets:
                sock.close()


async def test_a_stalled_upstream_does_not_stop_other_tenants(live: Live, stall: tuple[str, Stall]) -> None:
    upstream, state = stall
    async with httpx.AsyncClient(base_url=live.url, timeout=120) as client:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            mallory = new_org(http, "avail-tool-mallory", "Mallory GmbH")
            bob = new_org(http, "avail-tool-bob", "Bob KG")
            tool = http.post("/api/tools", json=_tool("stalled", f"{upstream}/order"), headers=mallory)
            assert tool.status_code == 200, tool.text
        tests = [
            asyncio.create_task(
                client.post(f"/api/tools/{tool.json()['id']}/test", json={"arguments": {}}, headers=mallory)
            )
            for _ in range(ATTACKERS)
        ]
        await state.wait_for(ATTACKERS)  # every tool test is now waiting on the upstream
        await _other_tenant_is_served(client, bob, "tool")
        assert not any(task.done() for task in tests)  # served while the attack still ran
        state.release.set()
        for report in await asyncio.gather(*tests):
            assert report.status_code == 200, report.text
            assert report.json()["status"] == "ok", report.json()


def _flow(tool: str | None) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "What do you need?", "next": "call"},
        {"id": "done", "type": "end", "text": "Thank you."},
    ]
    if tool:
        nodes.append(
            {
                "id": "call",
                "type": "tool",
                "tool": tool,
                "arguments": {},
                "result_variable": "result",
                "on_error": "done",
                "next": "done",
            }
        )
    else:
        nodes[0]["next"] = "done"
    return {"language": "en", "variables": {"result": None}, "start_node": "ask", "nodes": nodes}


async def _published_flow(client: httpx.AsyncClient, headers: dict[str, str], tool: str | None) -> str:
    created = await client.post(
        "/api/flows", json={"name": "Agent", "definition": _flow(tool)}, headers=headers
    )
    assert created.status_code == 200, created.text
    flow_id = str(created.json()["id"])
    published = await client.post(f"/api/flows/{flow_id}/publish", headers=headers)
    assert published.status_code == 200, published.text
    return flow_id


async def _start(client: httpx.AsyncClient, headers: dict[str, str], flow_id: str) -> str:
    started = await client.post("/api/sessions", json={"flow_id": flow_id}, headers=headers)
    assert started.status_code == 200, started.text
    return str(started.json()["id"])


async def test_turns_waiting_on_a_stalled_tool_do_not_stop_other_tenants_turns(
    live: Live, stall: tuple[str, Stall]
) -> None:
    upstream, state = stall
    slots = slots_per_organization(live.settings)
    async with httpx.AsyncClient(base_url=live.url, timeout=120) as client:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            mallory = new_org(http, "avail-turn-mallory", "Mallory GmbH")
            bob = new_org(http, "avail-turn-bob", "Bob KG")
            assert http.post("/api/tools", json=_tool("stalled", f"{upstream}/o"), headers=mallory).is_success
        mallory_flow = await _published_flow(client, mallory, "stalled")
        bob_flow = await _published_flow(client, bob, None)
        sessions = [await _start(client, mallory, mallory_flow) for _ in range(ATTACKERS)]
        turns = [
            asyncio.create_task(
                client.post(f"/api/sessions/{sid}/messages", json={"text": "status"}, headers=mallory)
            )
            for sid in sessions
        ]
        await state.wait_for(slots)  # every one of Mallory's turn slots waits on the upstream

        bob_session = await _start(client, bob, bob_flow)
        turn = await client.post(f"/api/sessions/{bob_session}/messages", json={"text": "hi"}, headers=bob)
        assert turn.status_code == 200, turn.text
        assert turn.json()["reply"] == "Thank you." and turn.json()["status"] == "ended"
        await _other_tenant_is_served(client, bob, "turn")
        assert not any(task.done() for task in turns)

        state.release.set()
        for answer in await asyncio.gather(*turns):
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "ended", answer.json()


def test_a_body_that_never_completes_is_408(fresh_db: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from parley.app import create_app
    from tests.security.conftest import live_settings

    settings = live_settings(tmp_path_factory.mktemp("body-timeout"), fresh_db, request_body_timeout=1.0)
    with serve_in_thread(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as http:
        mallory = new_org(http, "avail-408-mallory", "Mallory GmbH")
        [sock] = _open_slow_bodies(url, mallory, 1)
        try:
            answer = sock.recv(4096).decode()  # blocks until the server gives up on the body
        finally:
            sock.close()
    assert answer.startswith("HTTP/1.1 408"), answer
    assert "request_timeout" in answer and "did not arrive within 1 seconds" in answer
