"""Call-event fixtures: the notification tests' local HTTP receiver on loopback (real HTTP, real
signatures), the local OpenAI-compatible server, and platform apps allowed to reach them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database, unit_of_work
from parley.kit.jobs import runner_for
from parley.webhooks.service import publish_event
from tests.conftest import auth
from tests.live import serve_in_thread
from tests.notifications.conftest import Receiver, receiver
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.openai import StubState, make_openai_stub

__all__ = ["Receiver", "receiver"]

SECRET = "whsec_call_events_secret_42"
LOOPBACK: dict[str, Any] = {
    "outbound_allowlist": ["127.0.0.1"],
    "webhook_retry_seconds": [0.0],
    "webhook_timeout": 1.0,
    "llm_timeout": 2.0,
}

# A flow that asks whether to call back, raises a signal, and declares its post-call analysis.
CALLBACK_FLOW: dict[str, Any] = {
    "language": "de",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "callback_requested",
            "kind": "yes_no",
            "prompt": "Sollen wir Sie zurückrufen?",
            "next": "when",
        },
        {"id": "when", "type": "collect", "variable": "preferred_time", "prompt": "Wann?", "next": "flag"},
        {
            "id": "flag",
            "type": "signal",
            "signal_type": "callback_requested",
            "severity": "medium",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Danke, auf Wiederhören."},
    ],
    "analysis": {
        "summary": True,
        "fields": {
            "callback_requested": {"type": "bool", "description": "The caller wants a call back."},
            "preferred_time": {"type": "str", "description": "When to call back."},
            "topic": {"type": "enum", "values": ["billing", "delivery"]},
        },
    },
}


def unique(name: str) -> str:
    """A receiver path of this test alone (the receiver is shared by the SQLite and PostgreSQL runs)."""
    return f"/hook/flaky/{name}-{uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def llm() -> Iterator[tuple[str, StubState]]:
    state = StubState()
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@dataclass
class Platform:
    app: Any
    client: httpx.AsyncClient
    headers: dict[str, str]
    org: str
    database: Database

    async def drain(self) -> None:
        await runner_for(self.app.state).drain()

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers)

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, params=params, headers=self.headers)

    async def subscribe(self, url: str, *types: str, secret: str = SECRET) -> dict[str, Any]:
        body = {"url": url, "event_types": list(types), "secret": secret}
        response = await self.post("/api/webhooks/subscriptions", body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def flow(self, definition: dict[str, Any]) -> str:
        response = await self.post("/api/flows", {"name": "Rückruf", "definition": definition})
        assert response.status_code == 200, response.text
        flow_id = str(response.json()["id"])
        published = await self.post(f"/api/flows/{flow_id}/publish")
        assert published.status_code == 200, published.text
        return flow_id

    async def converse(self, flow_id: str, *lines: str) -> str:
        """A whole conversation over the API; answers the session id once the jobs have run."""
        started = await self.post("/api/sessions", {"flow_id": flow_id, "channel": "phone"})
        assert started.status_code == 200, started.text
        session_id = str(started.json()["id"])
        for line in lines:
            turn = await self.post(f"/api/sessions/{session_id}/messages", {"text": line})
            assert turn.status_code == 200, turn.text
        await self.drain()
        return session_id

    async def call_of(self, session_id: str) -> dict[str, Any]:
        listed = await self.get("/api/calls")
        assert listed.status_code == 200, listed.text
        calls = [c for c in listed.json()["items"] if c["id"]]
        for summary in calls:
            full = await self.get(f"/api/calls/{summary['id']}")
            if full.json()["session_id"] == session_id:
                return dict(full.json())
        raise AssertionError(f"no call of session {session_id}")

    async def configure_llm(self, stub_url: str, model: str = "stub-model") -> None:
        response = await self.client.put(
            "/api/providers/openai/config",
            json={"api_key": "sk-test-stub-key", "base_url": f"{stub_url}/v1", "model": model},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text

    async def publish(self, event_type: str, data: dict[str, Any]) -> list[str]:
        """Publish as another package does: inside a unit of work, delivered after the commit."""
        runner = runner_for(self.app.state)
        async with unit_of_work(self.database, jobs=runner) as session:
            ids = await publish_event(session, self.org, event_type, data)
        await self.drain()
        return ids


PlatformFactory = Callable[..., Any]


@pytest.fixture
async def make_platform(settings: Settings, database: Database) -> AsyncIterator[PlatformFactory]:
    """Platform apps over the test's database; each call makes a new organization owned by Alice."""
    opened: list[tuple[httpx.AsyncClient, Any]] = []

    async def build(**overrides: Any) -> Platform:
        app = create_app(settings.model_copy(update={**LOOPBACK, **overrides}), database=database)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
        opened.append((client, app))
        org = str((await create_org(client, name=f"Werkstatt {uuid4().hex[:6]}"))["id"])
        return Platform(app, client, auth(ALICE, org), org, database)

    yield build
    for client, app in opened:
        runner = runner_for(app.state)
        await runner.drain()
        await runner.stop()
        await client.aclose()


@pytest.fixture
async def platform(make_platform: PlatformFactory) -> Platform:
    return await make_platform()  # type: ignore[no-any-return]
