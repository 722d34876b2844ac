"""Channels fixtures: a platform app pointed at a local Graph API stub, an organization, test flows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import auth, make_token
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.whatsapp import StubState, make_graph_stub, meta_payload, sign, text_message

ACCESS_TOKEN = "EAAG-test-access-token"
APP_SECRET = "app-secret-0123456789abcdef"
VERIFY_TOKEN = "verify-me-please"


def echo_flow(greeting: str = "Hallo, hier ist Autohaus Demo.") -> dict[str, Any]:
    """Greets, then answers every message with what it understood, until the session ends."""
    return {
        "language": "de",
        "start_node": "greet",
        "nodes": [
            {"id": "greet", "type": "say", "text": greeting, "next": "ask"},
            {
                "id": "ask",
                "type": "collect",
                "variable": "wish",
                "prompt": "Was kann ich tun?",
                "next": "echo",
            },
            {"id": "echo", "type": "say", "text": "Sie sagten: {{ wish }}", "next": "ask"},
        ],
    }


def closed_flow() -> dict[str, Any]:
    return {
        "language": "de",
        "start_node": "bye",
        "nodes": [{"id": "bye", "type": "end", "text": "Wir haben geschlossen."}],
    }


@dataclass
class Org:
    app: Any
    client: httpx.AsyncClient
    headers: dict[str, str]
    id: str

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers)

    async def patch(self, path: str, body: Any) -> httpx.Response:
        return await self.client.patch(path, json=body, headers=self.headers)

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.headers, params=params)

    async def delete(self, path: str) -> httpx.Response:
        return await self.client.delete(path, headers=self.headers)

    async def flow(self, definition: dict[str, Any], name: str = "Agent") -> str:
        response = await self.post("/api/flows", {"name": name, "definition": definition})
        assert response.status_code == 200, response.text
        flow_id = str(response.json()["id"])
        published = await self.post(f"/api/flows/{flow_id}/publish")
        assert published.status_code == 200, published.text
        return flow_id

    async def account(self, phone_number_id: str = "106540352242922", **fields: Any) -> dict[str, Any]:
        body = {
            "name": "Werkstatt",
            "phone_number_id": phone_number_id,
            "waba_id": "102290129340398",
            "display_phone_number": "+49 30 1234567",
            "verify_token": VERIFY_TOKEN,
            "access_token": ACCESS_TOKEN,
            "app_secret": APP_SECRET,
            **fields,
        }
        response = await self.post("/api/channels/whatsapp/accounts", body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def route(self, **body: Any) -> dict[str, Any]:
        response = await self.post("/api/channels/routes", body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def webhook(
        self, payload: Any, *, secret: str = APP_SECRET, signature: str | None = None
    ) -> httpx.Response:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        headers = {"Content-Type": "application/json", "X-Hub-Signature-256": signature or sign(raw, secret)}
        return await self.client.post("/api/channels/whatsapp/webhook", content=raw, headers=headers)

    async def message(self, phone_number_id: str, wamid: str, sender: str, text: str) -> httpx.Response:
        return await self.webhook(meta_payload(phone_number_id, [text_message(wamid, sender, text)]))

    async def drain(self) -> None:
        await self.app.state.jobs.drain()


@pytest.fixture(scope="session")
def graph() -> Iterator[tuple[str, StubState]]:
    state = StubState()
    with serve_in_thread(make_graph_stub(state)) as url:
        yield url, state


@pytest.fixture
def graph_state(graph: tuple[str, StubState]) -> StubState:
    _, state = graph
    state.requests.clear()
    state.script.clear()
    return state


@pytest.fixture
async def make_org(
    settings: Settings, database: Database, graph: tuple[str, StubState]
) -> AsyncIterator[Any]:
    opened: list[httpx.AsyncClient] = []
    app = create_app(
        settings.model_copy(
            update={
                "outbound_allowlist": ["127.0.0.1"],
                "whatsapp_graph_url": graph[0],
                "whatsapp_retry_seconds": 0.0,
            }
        ),
        database=database,
    )

    async def build(token: str = ALICE, name: str = "Autohaus Demo") -> Org:
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
        opened.append(client)
        org = str((await create_org(client, token, name))["id"])
        return Org(app, client, auth(token, org), org)

    yield build
    for client in opened:
        await client.aclose()


@pytest.fixture
async def org(make_org: Any) -> Org:
    return await make_org()  # type: ignore[no-any-return]


BOB = make_token("bob", name="Bob")
