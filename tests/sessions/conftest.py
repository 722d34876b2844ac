"""Sessions fixtures: the real order connector and an OpenAI-compatible stub on loopback, and helpers
to set up an organization with the order_lookup tool and the documented order-status flow."""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import auth
from tests.live import free_port, serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.openai import StubState, make_openai_stub

DOCS = Path(__file__).resolve().parents[2] / "docs" / "flows.md"


def order_status_flow() -> dict[str, Any]:
    """The complete example of docs/flows.md, so the documentation is what the tests run."""
    text = DOCS.read_text()
    section = text[text.index("## Complete example") :]
    match = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert match is not None
    return dict(json.loads(match.group(1)))


async def _slow(request: Request) -> PlainTextResponse:
    await asyncio.sleep(3)
    return PlainTextResponse("late")


async def _text(request: Request) -> PlainTextResponse:
    return PlainTextResponse("this is not JSON at all")


async def _json(request: Request) -> JSONResponse:
    return JSONResponse({"success": True, "order": {"project_status": "fertig"}})


@pytest.fixture(scope="session")
def upstream() -> Iterator[str]:
    """A small HTTP upstream for http tools: slow, plain-text and JSON answers."""
    app = Starlette(routes=[Route("/slow", _slow), Route("/text", _text), Route("/json", _json)])
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture(scope="session")
def llm_stub() -> Iterator[tuple[str, StubState]]:
    state = StubState()
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@dataclass
class Platform:
    client: httpx.AsyncClient
    headers: dict[str, str]
    org: str
    app: Any = None

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        return await self.client.post(
            path, json=body, headers={**self.headers, **kwargs.pop("headers", {})}, **kwargs
        )

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.headers, **kwargs)

    async def tool(self, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.post("/api/tools", body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def flow(self, definition: dict[str, Any], *, publish: bool = True, name: str = "Agent") -> str:
        response = await self.post("/api/flows", {"name": name, "definition": definition})
        assert response.status_code == 200, response.text
        flow_id = str(response.json()["id"])
        if publish:
            published = await self.post(f"/api/flows/{flow_id}/publish")
            assert published.status_code == 200, published.text
        return flow_id

    async def start(self, flow_id: str, **body: Any) -> dict[str, Any]:
        response = await self.post("/api/sessions", {"flow_id": flow_id, **body})
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def say(self, session_id: str, text: str) -> dict[str, Any]:
        response = await self.post(f"/api/sessions/{session_id}/messages", {"text": text})
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture
async def make_platform(settings: Settings, database: Database) -> AsyncIterator[Any]:
    """A platform app (127.0.0.1 allow-listed) with a fresh organization, over the test's database."""
    opened: list[httpx.AsyncClient] = []

    async def build(**overrides: Any) -> Platform:
        app = create_app(
            settings.model_copy(update={"outbound_allowlist": ["127.0.0.1"], **overrides}), database=database
        )
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
        opened.append(client)
        org = str((await create_org(client))["id"])
        return Platform(client, auth(ALICE, org), org, app)

    yield build
    for client in opened:
        await client.aclose()


@pytest.fixture
async def shop(make_platform: Any, connector: dict[str, str]) -> tuple[Platform, str]:
    """An organization with the order_lookup tool on the real connector and the published example flow."""
    platform: Platform = await make_platform(connector_url=connector["url"])
    await platform.tool(
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    )
    return platform, await platform.flow(order_status_flow())


def with_nodes(definition: dict[str, Any], replace: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(definition)
    out["nodes"] = [replace.get(n["id"], n) for n in out["nodes"]]
    return out


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"
