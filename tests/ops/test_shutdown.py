"""SIGTERM to a real ``parley serve``: it drains (no new sessions, 503), lets a live call that ends
itself finish, ends the call still running after the grace period with reason ``shutdown`` (call
record written), then exits. Log lines of requests and the audio socket carry their ids."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import JWT_SECRET, make_token
from tests.live import free_port

GRACE_SECONDS = 4
FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "number",
            "kind": "digits",
            "prompt": "Say your number.",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Thanks."},
    ],
}
SILENCE = b"\x00\x00" * 320  # 20 ms at 16 kHz


def _env(data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PARLEY_DATA_DIR": str(data_dir),
        "PARLEY_DATABASE_URL": f"sqlite+aiosqlite:///{data_dir / 'parley.db'}",
        "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
        "PARLEY_SHUTDOWN_GRACE_SECONDS": str(GRACE_SECONDS),
        "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
        "PARLEY_LOG_JSON": "true",
        "PARLEY_LOG_LEVEL": "INFO",
    }


class Caller:
    """A client on the audio socket that streams silence and records the server's events."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.ready = asyncio.Event()
        self.sending = True
        self.tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._send())]

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in self.ws:
                if isinstance(message, str):
                    event = json.loads(message)
                    self.events.append(event)
                    if event["type"] == "ready":
                        self.ready.set()

    async def _send(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            while self.sending:
                await self.ws.send(SILENCE)
                await asyncio.sleep(0.02)

    async def hang_up(self) -> None:
        self.sending = False
        await self.ws.send(json.dumps({"type": "end"}))

    async def closed(self) -> int | None:
        await asyncio.wait_for(asyncio.gather(*self.tasks), 60)
        return self.ws.close_code


async def _call(ws_url: str, session_id: str, token: str, org: str) -> Caller:
    ws = await connect(
        f"{ws_url}/api/sessions/{session_id}/audio?org={org}",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=30,
    )
    caller = Caller(ws)
    await asyncio.wait_for(caller.ready.wait(), 30)
    return caller


@pytest.mark.slow
async def test_sigterm_drains_live_calls(tmp_path: Path) -> None:
    env = _env(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "parley", "db", "upgrade"], env=env, check=True, capture_output=True
    )
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "parley", "serve", "--port", str(port)], env=env, stderr=log_file
        )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        break
                assert time.monotonic() < deadline, "the server did not start"
                await asyncio.sleep(0.2)
            token = make_token("ops-shutdown")
            headers = {"Authorization": f"Bearer {token}"}
            org = (await client.post("/api/organizations", json={"name": "Drain"}, headers=headers)).json()[
                "id"
            ]
            headers["X-Organization-Id"] = org
            flow = (
                await client.post("/api/flows", json={"name": "D", "definition": FLOW}, headers=headers)
            ).json()
            assert (await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)).status_code == 200
            ids = []
            for _ in range(2):
                created = await client.post(
                    "/api/sessions", json={"flow_id": flow["id"], "voiced": True}, headers=headers
                )
                assert created.status_code == 200, created.text
                ids.append(created.json()["id"])
            ws_url = base.replace("http://", "ws://")
            polite, stubborn = [await _call(ws_url, i, token, org) for i in ids]

            server.send_signal(signal.SIGTERM)
            # Draining: the process still serves, but takes no new sessions and is not ready. (The
            # signal is handled on the server's loop, so wait until it says so before asking more.)
            deadline = time.monotonic() + 30
            while (ready := await client.get("/readyz")).status_code != 503:
                assert time.monotonic() < deadline, "the server did not start draining"
                await asyncio.sleep(0.05)
            refused = await client.post("/api/sessions", json={"flow_id": flow["id"]}, headers=headers)
            turn = await client.get(f"/api/sessions/{ids[0]}", headers=headers)
            async with connect(
                f"{ws_url}/api/sessions/{ids[0]}/audio?org={org}",
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=30,
            ) as late:
                with contextlib.suppress(ConnectionClosed):
                    async for _ in late:
                        pass
                late_code = late.close_code
            await polite.hang_up()
            polite_code = await polite.closed()
            stubborn_code = await stubborn.closed()
        assert server.wait(timeout=60) is not None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "2" and refused.json()["code"] == "shutting_down"
    assert ready.status_code == 503 and ready.json()["checks"]["shutdown"] == "draining"
    assert turn.status_code == 200  # live sessions are still served
    assert late_code == 4503
    assert polite_code == 1000
    assert stubborn_code == 1012
    assert {"type": "end", "outcome": "failed", "reason": "shutdown"} in stubborn.events

    with sqlite3.connect(tmp_path / "parley.db") as db:
        rows = dict(db.execute("SELECT id, end_reason FROM conversation_sessions").fetchall())
        recorded = {r[0] for r in db.execute("SELECT session_id FROM calls").fetchall()}
    assert rows == {ids[0]: "caller_ended", ids[1]: "shutdown"}
    assert recorded == set(ids)

    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    assert requests and all(line.get("request_id", "").startswith("req_") for line in requests)
    session_lines = [line for line in requests if "/api/sessions/{sessionId}" in line.get("route", "")]
    assert session_lines and all(line.get("session_id") == ids[0] for line in session_lines)
    events = {line["event"] for line in lines}
    assert {"shutdown_signal", "shutdown_draining", "shutdown_ending_calls"} <= events
