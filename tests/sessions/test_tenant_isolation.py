"""One tenant's slow client or slow upstream cannot stop another tenant (issue 18, short transactions).

Each test runs the platform under uvicorn on a loopback port, on its own freshly migrated SQLite file or
PostgreSQL database, and attacks it over real sockets: a client that sends headers and 13 of 1,000
body bytes and then stalls, and a tool whose upstream (a local HTTP server) does not answer until the
test lets it. Meanwhile another organization's reads, writes and conversation turns must succeed.
There are no timing thresholds: the other tenant's requests only have to complete (within a generous
client time-out, far above the database's lock wait and pool wait, which is how they failed before).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated, pg
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread

GENEROUS = 120.0  # seconds: only a hang fails, never a slow machine

ECHO = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "said", "prompt": "Say something.", "next": "echo"},
        {"id": "echo", "type": "say", "text": "Echo {{ said }}.", "next": "ask"},
    ],
}

UPSTREAM_FLOW = {
    "language": "en",
    "variables": {"result": None},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "What do you need?", "next": "call"},
        {
            "id": "call",
            "type": "tool",
            "tool": "upstream",
            "arguments": {},
            "result_variable": "result",
            "on_error": "sorry",
            "next": "done",
        },
        {"id": "done", "type": "say", "text": "Done.", "next": "ask"},
        {"id": "sorry", "type": "say", "text": "Let me note that.", "next": "ask"},
    ],
}


@pytest.fixture(params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of this test alone (the live server commits for real)."""
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path / "isolation.db")
        return
    pg.require_postgres()
    name, url = migrated.postgres("parley_isolation")
    try:
        yield url
    finally:
        pg.drop_database(name)


@contextmanager
def platform(tmp_path: Path, url: str, **overrides: Any) -> Iterator[str]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        log_json=False,
        outbound_allowlist=["127.0.0.1"],
        rate_limit_per_minute=0,
        **overrides,
    )
    with serve_in_thread(create_app(settings)) as base:
        yield base


class Upstream:
    """An HTTP server whose ``/slow`` answers only once ``release`` is set; ``held`` counts the calls
    it is holding."""

    def __init__(self) -> None:
        self.held = 0
        self.arrival = threading.Condition()
        self.release = threading.Event()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with upstream.arrival:
                    upstream.held += 1
                    upstream.arrival.notify_all()
                upstream.release.wait(GENEROUS)
                body = json.dumps({"ok": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        return self

    def __exit__(self, *args: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def tenant(client: httpx.Client, user: str) -> dict[str, str]:
    """A user with an organization of their own: the headers that act in it."""
    headers = {"Authorization": f"Bearer {make_token(user)}"}
    created = client.post("/api/organizations", json={"name": f"Org of {user}"}, headers=headers)
    assert created.status_code == 200, created.text
    return {**headers, "X-Organization-Id": created.json()["id"]}


def stalled_body(base: str, headers: dict[str, str], path: str = "/api/tools") -> socket.socket:
    """A request whose headers arrive whole but whose body stops after 13 of 1,000 bytes."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=GENEROUS)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += ["Content-Length: 1000", "", ""]
    sock.sendall("\r\n".join(lines).encode() + b'{"name": "slo')
    return sock


def published_flow(client: httpx.Client, headers: dict[str, str], definition: dict[str, Any]) -> str:
    flow = client.post("/api/flows", json={"name": "Flow", "definition": definition}, headers=headers)
    assert flow.status_code == 200, flow.text
    published = client.post(f"/api/flows/{flow.json()['id']}/publish", headers=headers)
    assert published.status_code == 200, published.text
    return str(flow.json()["id"])


def a_turn(client: httpx.Client, headers: dict[str, str], flow_id: str, text: str) -> dict[str, Any]:
    opening = client.post("/api/sessions", json={"flow_id": flow_id}, headers=headers)
    assert opening.status_code == 200, opening.text
    turn = client.post(f"/api/sessions/{opening.json()['id']}/messages", json={"text": text}, headers=headers)
    assert turn.status_code == 200, turn.text
    return dict(turn.json())


def other_tenant_works(client: httpx.Client, headers: dict[str, str], name: str) -> None:
    """A write, a read and a conversation turn of the other organization all succeed."""
    created = client.post(
        "/api/tools",
        json={"name": name, "type": "http", "config": {"method": "GET", "url": "http://127.0.0.1:9/x"}},
        headers=headers,
    )
    assert created.status_code == 200, created.text
    listed = client.get("/api/tools", headers=headers)
    assert listed.status_code == 200 and name in [t["name"] for t in listed.json()["items"]]
    flow_id = published_flow(client, headers, ECHO)
    assert a_turn(client, headers, flow_id, "hello")["reply"].startswith("Echo hello.")


def test_a_stalled_request_body_does_not_block_another_organizations_writes(
    tmp_path: Path, database_url: str
) -> None:
    with (
        platform(tmp_path, database_url, request_body_timeout=3600) as base,
        httpx.Client(base_url=base, timeout=GENEROUS) as client,
    ):
        slow, other = tenant(client, "slow-client"), tenant(client, "other-client")
        stalled = stalled_body(base, slow)
        try:
            other_tenant_works(client, other, "written_while_stalled")
        finally:
            stalled.close()


def test_thirty_stalled_bodies_leave_the_pool_to_everyone_else(tmp_path: Path, database_url: str) -> None:
    # A small pool (5 + 2 overflow on PostgreSQL, 5 on SQLite): 30 stalled requests would take it all
    # if a request held a connection while its body arrives.
    with (
        platform(tmp_path, database_url, request_body_timeout=3600, db_pool_size=5) as base,
        httpx.Client(base_url=base, timeout=GENEROUS) as client,
    ):
        slow, other = tenant(client, "slow-many"), tenant(client, "other-many")
        stalled = [stalled_body(base, slow) for _ in range(30)]
        try:
            other_tenant_works(client, other, "written_beside_thirty")
        finally:
            for sock in stalled:
                sock.close()


def test_a_body_that_does_not_arrive_in_time_is_a_408(tmp_path: Path, database_url: str) -> None:
    with platform(tmp_path, database_url, request_body_timeout=0.5) as base:
        with httpx.Client(base_url=base, timeout=GENEROUS) as client:
            slow = tenant(client, "too-slow")
        sock = stalled_body(base, slow)
        try:
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        finally:
            sock.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer
        error = json.loads(body)
        assert error["code"] == "request_timeout" and "did not arrive" in error["detail"]


def test_a_slow_upstream_in_a_tool_test_or_a_turn_does_not_block_other_tenants(
    tmp_path: Path, database_url: str
) -> None:
    # Turn slots are per organization: the slow organization holds its own (one here), never the
    # other organization's.
    with (
        Upstream() as upstream,
        platform(tmp_path, database_url, turn_slots_per_organization=1) as base,
        httpx.Client(base_url=base, timeout=GENEROUS) as client,
    ):
        slow, other = tenant(client, "slow-upstream"), tenant(client, "other-upstream")
        tool = client.post(
            "/api/tools",
            json={
                "name": "upstream",
                "type": "http",
                "config": {"method": "GET", "url": f"{upstream.url}/slow", "timeout_seconds": 30},
            },
            headers=slow,
        )
        assert tool.status_code == 200, tool.text
        slow_flow = published_flow(client, slow, UPSTREAM_FLOW)
        answers: dict[str, httpx.Response] = {}

        def tool_test() -> None:
            with httpx.Client(base_url=base, timeout=GENEROUS) as own:
                answers["test"] = own.post(
                    f"/api/tools/{tool.json()['id']}/test", json={"arguments": {}}, headers=slow
                )

        def slow_turn() -> None:
            with httpx.Client(base_url=base, timeout=GENEROUS) as own:
                opening = own.post("/api/sessions", json={"flow_id": slow_flow}, headers=slow)
                answers["turn"] = own.post(
                    f"/api/sessions/{opening.json()['id']}/messages", json={"text": "status"}, headers=slow
                )

        waiting = [threading.Thread(target=tool_test), threading.Thread(target=slow_turn)]
        for thread in waiting:
            thread.start()
        try:
            with upstream.arrival:
                both = upstream.arrival.wait_for(lambda: upstream.held >= 2, GENEROUS)
            assert both, "the slow organization's calls never reached the upstream"
            other_tenant_works(client, other, "written_while_upstream_sleeps")
        finally:
            upstream.release.set()
            for thread in waiting:
                thread.join(GENEROUS)
        assert answers["test"].status_code == 200, answers["test"].text
        assert answers["turn"].status_code == 200, answers["turn"].text


def test_turns_waiting_for_a_slot_hold_no_database_connection(tmp_path: Path, database_url: str) -> None:
    # Twelve turns of one organization, one slot, a pool of three: the eleven that wait in line must
    # not hold connections, or the running turn could not get one to save itself.
    with (
        platform(tmp_path, database_url, turn_slots_per_organization=1, db_pool_size=3) as base,
        httpx.Client(base_url=base, timeout=GENEROUS) as client,
    ):
        busy = tenant(client, "busy-org")
        flow_id = published_flow(client, busy, ECHO)
        replies: list[str] = []
        errors: list[str] = []

        def converse(i: int) -> None:
            with httpx.Client(base_url=base, timeout=GENEROUS) as own:
                opening = own.post("/api/sessions", json={"flow_id": flow_id}, headers=busy)
                if opening.status_code != 200:
                    errors.append(opening.text)
                    return
                turn = own.post(
                    f"/api/sessions/{opening.json()['id']}/messages", json={"text": f"n{i}"}, headers=busy
                )
                if turn.status_code != 200:
                    errors.append(turn.text)
                    return
                replies.append(turn.json()["reply"])

        threads = [threading.Thread(target=converse, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(GENEROUS)
        assert errors == []
        assert sorted(replies) == sorted(f"Echo n{i}. Say something." for i in range(12))
