"""Telephony fixtures: the LiveKit Twirp stub and the Twilio REST stub on loopback, and an organization
with a published flow and both providers configured against them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import auth, make_token
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs import livekit as lk_stub
from tests.stubs import twilio as tw_stub

PUBLIC_URL = "https://parley.example"
ADMIN = make_token("root-admin")

ECHO = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "said", "prompt": "Say something.", "next": "echo"},
        {"id": "echo", "type": "say", "text": "Echo {{ said }}.", "next": "ask"},
    ],
}


@dataclass
class Stub:
    url: str
    state: Any


@pytest.fixture(scope="session")
def _livekit_server() -> Iterator[Stub]:
    state = lk_stub.LiveKitState()
    with serve_in_thread(lk_stub.make_livekit_stub(state)) as url:
        yield Stub(url, state)


@pytest.fixture(scope="session")
def _twilio_server() -> Iterator[Stub]:
    state = tw_stub.TwilioState()
    with serve_in_thread(tw_stub.make_twilio_stub(state)) as url:
        yield Stub(url, state)


@pytest.fixture
def livekit(_livekit_server: Stub) -> Iterator[Stub]:
    _livekit_server.state.reset()
    yield _livekit_server
    _livekit_server.state.reset()


@pytest.fixture
def twilio(_twilio_server: Stub) -> Iterator[Stub]:
    _twilio_server.state.reset()
    yield _twilio_server
    _twilio_server.state.reset()


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The stubs listen on loopback, which outbound calls may reach only when allow-listed."""
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.outbound_timeout = 5.0
    settings.public_url = PUBLIC_URL
    return settings


@dataclass
class Org:
    client: httpx.AsyncClient
    id: str
    headers: dict[str, str]
    flow_id: str

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers)

    async def patch(self, path: str, body: Any) -> httpx.Response:
        return await self.client.patch(path, json=body, headers=self.headers)

    async def get(self, path: str) -> httpx.Response:
        return await self.client.get(path, headers=self.headers)

    async def delete(self, path: str) -> httpx.Response:
        return await self.client.delete(path, headers=self.headers)

    async def make(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.post(path, body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def sync(self) -> httpx.Response:
        return await self.client.post(
            f"/api/admin/organizations/{self.id}/telephony/sync", headers=auth(ADMIN)
        )

    async def configure(self, key: str, config: dict[str, Any]) -> None:
        response = await self.client.put(f"/api/providers/{key}/config", json=config, headers=self.headers)
        assert response.status_code == 200, response.text


@pytest.fixture
async def client(settings: Settings, database: Database) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test") as c:
        yield c


async def new_org(client: httpx.AsyncClient, token: str = ALICE, name: str = "Autohaus Demo") -> Org:
    org_id = str((await create_org(client, token, name))["id"])
    headers = auth(token, org_id)
    flow = await client.post("/api/flows", json={"name": "Agent", "definition": ECHO}, headers=headers)
    assert flow.status_code == 200, flow.text
    flow_id = str(flow.json()["id"])
    published = await client.post(f"/api/flows/{flow_id}/publish", headers=headers)
    assert published.status_code == 200, published.text
    return Org(client, org_id, headers, flow_id)


@pytest.fixture
async def org(client: httpx.AsyncClient) -> Org:
    return await new_org(client)


@pytest.fixture
async def connected(org: Org, livekit: Stub, twilio: Stub) -> Org:
    """The organization with LiveKit and Twilio configured against the local stubs."""
    await org.configure(
        "livekit", {"url": livekit.url, "api_key": lk_stub.API_KEY, "api_secret": lk_stub.API_SECRET}
    )
    await org.configure(
        "twilio",
        {"account_sid": tw_stub.ACCOUNT_SID, "auth_token": tw_stub.AUTH_TOKEN, "api_base": twilio.url},
    )
    return org
