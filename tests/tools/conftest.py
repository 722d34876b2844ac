"""Tools fixtures: apps with an outbound allow-list, a stub upstream on loopback, the real connector."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import auth
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org

ClientFactory = Callable[..., httpx.AsyncClient]


async def _echo(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "raw_path": request.scope["raw_path"].decode(),
            "query": dict(request.query_params),
            "headers": dict(request.headers),
            "json": json.loads(body) if body else None,
            "order": {"status": "in Arbeit", "lines": [{"price": 12.5}]},
        }
    )


async def _slow(request: Request) -> PlainTextResponse:
    await asyncio.sleep(3)
    return PlainTextResponse("late")


async def _status(request: Request) -> JSONResponse:
    return JSONResponse({"error": "upstream broke"}, status_code=int(request.path_params["code"]))


async def _big(request: Request) -> JSONResponse:
    return JSONResponse({"items": ["x" * 100] * 500})


async def _huge(request: Request) -> Response:
    return Response(b"y" * (2 * 1024 * 1024), media_type="text/plain")


async def _redirect(request: Request) -> RedirectResponse:
    return RedirectResponse(request.query_params["to"])


@pytest.fixture(scope="session")
def stub_url() -> Iterator[str]:
    app = Starlette(
        routes=[
            Route("/echo/{rest:path}", _echo, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            Route("/slow", _slow),
            Route("/status/{code:int}", _status),
            Route("/big", _big),
            Route("/huge", _huge),
            Route("/redirect", _redirect),
        ]
    )
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture
async def make_client(settings: Settings, database: Database) -> AsyncIterator[ClientFactory]:
    """Clients of platform apps over the test's database, with settings changed (e.g. allow-list)."""
    opened: list[httpx.AsyncClient] = []

    def build(**overrides: Any) -> httpx.AsyncClient:
        app = create_app(settings.model_copy(update=overrides), database=database)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
        opened.append(client)
        return client

    yield build
    for client in opened:
        await client.aclose()


@pytest.fixture
def allow_client(make_client: ClientFactory) -> httpx.AsyncClient:
    """The platform with 127.0.0.1 allow-listed, so tools may call the stub upstream."""
    return make_client(outbound_allowlist=["127.0.0.1"])


@pytest.fixture
async def org(client: httpx.AsyncClient) -> str:
    return str((await create_org(client))["id"])


@pytest.fixture
def headers(org: str) -> dict[str, str]:
    return auth(ALICE, org)
