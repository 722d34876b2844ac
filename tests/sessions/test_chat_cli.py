"""``parley chat`` as a subprocess against a live platform on a migrated SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread

GREETER = {
    "language": "en",
    "start_node": "hello",
    "nodes": [
        {"id": "hello", "type": "say", "text": "Hello, I am the demo agent.", "next": "ask"},
        {"id": "ask", "type": "collect", "variable": "name", "prompt": "What is your name?", "next": "bye"},
        {"id": "bye", "type": "end", "text": "Goodbye, {{ name }}!"},
    ],
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("chat")
    url = migrated.sqlite_url(data_dir / "chat.db")
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        log_level="WARNING",
        log_json=False,
    )
    with serve_in_thread(create_app(settings)) as base_url:
        token = make_token("chatter", ttl=3600)
        headers = {"Authorization": f"Bearer {token}"}
        org = httpx.post(f"{base_url}/api/organizations", json={"name": "Chat"}, headers=headers).json()["id"]
        headers["X-Organization-Id"] = org
        flow = httpx.post(
            f"{base_url}/api/flows", json={"name": "Greeter", "definition": GREETER}, headers=headers
        ).json()
        assert httpx.post(f"{base_url}/api/flows/{flow['id']}/publish", headers=headers).status_code == 200
        yield {"url": base_url, "token": token, "org": org, "headers": headers, "flow": flow["id"]}


def chat(
    live: dict[str, Any], *args: str, text: str, token: bool = True, org: bool = True, **env_vars: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PARLEY_TOKEN": live["token"] if token else "", "COLUMNS": "200", **env_vars}
    if "PARLEY_ORG" not in env_vars:
        env.pop("PARLEY_ORG", None)
    org_args = ["--org", live["org"]] if org else []
    return subprocess.run(
        [sys.executable, "-m", "parley", "chat", "--url", live["url"], *org_args, *args],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_chat_until_the_flow_ends(live: dict[str, Any]) -> None:
    done = chat(live, text="Alice\n")
    assert done.returncode == 0, done.stderr
    assert "agent › Hello, I am the demo agent." in done.stdout
    assert "agent › What is your name?" in done.stdout
    assert "agent › Goodbye, Alice!" in done.stdout
    assert "Session ended: completed." in done.stdout


def test_chat_by_name_ends_on_ctrl_d(live: dict[str, Any]) -> None:
    done = chat(live, "greeter", text="")
    assert done.returncode == 0, done.stderr
    # The caller left before the flow's end: abandoned, in the CLI and on the call record.
    assert "What is your name?" in done.stdout and "Session ended: abandoned." in done.stdout
    live_sessions = httpx.get(f"{live['url']}/api/monitoring/sessions/live", headers=live["headers"]).json()
    assert live_sessions["items"] == []
    session_id = "ses_" + done.stdout.split("(ses_")[1].split(")")[0]
    calls = httpx.get(f"{live['url']}/api/calls", headers=live["headers"]).json()["items"]
    details = [httpx.get(f"{live['url']}/api/calls/{c['id']}", headers=live["headers"]).json() for c in calls]
    call = next(c for c in details if c["session_id"] == session_id)
    assert (call["outcome"], call["end_reason"]) == ("abandoned", "ended_by_client")


@pytest.mark.slow
def test_chat_explains_problems(live: dict[str, Any]) -> None:
    missing = chat(live, "no-such-flow", text="")
    assert missing.returncode == 1 and "No flow named 'no-such-flow'." in missing.stderr
    no_token = chat(live, text="", token=False)
    assert no_token.returncode == 2 and "No token" in no_token.stderr


@pytest.mark.slow
def test_without_org_the_cli_finds_the_organization_that_has_the_flow(live: dict[str, Any]) -> None:
    # A second organization without the flow (as after the README's "A first request").
    other = httpx.post(
        f"{live['url']}/api/organizations",
        json={"name": "Second shop"},
        headers={"Authorization": f"Bearer {live['token']}"},
    )
    assert other.status_code == 200, other.text
    by_name = chat(live, "Greeter", text="", org=False)
    assert by_name.returncode == 0, by_name.stderr
    assert "What is your name?" in by_name.stdout

    # the API's own answer names the header and the CLI's ways
    api = httpx.get(f"{live['url']}/api/flows", headers={"Authorization": f"Bearer {live['token']}"})
    assert api.status_code == 400
    assert all(way in api.json()["detail"] for way in ("X-Organization-Id", "--org", "PARLEY_ORG"))

    ambiguous = chat(live, text="", org=False)
    assert ambiguous.returncode == 1
    message = " ".join(ambiguous.stderr.split())
    assert "You belong to 2 organizations" in message
    assert "--org" in message and "PARLEY_ORG" in message and live["org"] in message

    by_env = chat(live, text="", org=False, PARLEY_ORG=live["org"])
    assert by_env.returncode == 0, by_env.stderr
    assert "What is your name?" in by_env.stdout
