"""The idle sweeper runs in a real server's lifespan and ends sessions nobody writes to."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread

FLOW = {
    "language": "de",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "x", "prompt": "Hallo?", "next": "bye"},
        {"id": "bye", "type": "end", "text": "Tschüss."},
    ],
}


def test_idle_sessions_end_by_themselves(tmp_path_factory: pytest.TempPathFactory) -> None:
    data_dir: Path = tmp_path_factory.mktemp("sweeper")
    url = migrated.sqlite_url(data_dir / "sweeper.db")
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        session_idle_seconds=0.5,
        log_level="WARNING",
        log_json=False,
    )
    with serve_in_thread(create_app(settings)) as base:
        headers = {"Authorization": f"Bearer {make_token('sweeper')}"}
        org = httpx.post(f"{base}/api/organizations", json={"name": "Sweep"}, headers=headers).json()["id"]
        headers["X-Organization-Id"] = org
        flow = httpx.post(
            f"{base}/api/flows", json={"name": "Idle", "definition": FLOW}, headers=headers
        ).json()
        httpx.post(f"{base}/api/flows/{flow['id']}/publish", headers=headers).raise_for_status()
        session = httpx.post(f"{base}/api/sessions", json={"flow_id": flow["id"]}, headers=headers).json()
        assert session["status"] == "active"
        deadline = time.monotonic() + 20
        state = session
        while state["status"] == "active" and time.monotonic() < deadline:
            time.sleep(0.2)
            state = httpx.get(f"{base}/api/sessions/{session['id']}", headers=headers).json()
        assert (state["status"], state["outcome"], state["end_reason"]) == (
            "ended",
            "abandoned",
            "idle_timeout",
        )
        calls = httpx.get(f"{base}/api/calls", headers=headers)
        assert calls.status_code == 200
        (listed,) = calls.json()["items"]
        call = httpx.get(f"{base}/api/calls/{listed['id']}", headers=headers).json()
        assert (call["session_id"], call["outcome"], call["end_reason"]) == (
            session["id"],
            "abandoned",
            "idle_timeout",
        )
