"""Connector fixtures: a migrated, seeded connector database on SQLite and on PostgreSQL.

The database is created once per backend and session (demo orders with a fixed seed and reference
date, so values are known); tests that write make their own ids or their own database.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import date
from pathlib import Path

import httpx
import pytest
import uvicorn

from parley.connector import setup
from parley.connector.app import ConnectorApp, create_connector_app
from parley.connector.config import ConnectorSettings
from tests import pg

DEMO_COUNT = 300
DEMO_SEED = 42
DEMO_REFERENCE = date(2025, 6, 2)
ORDER_BASE = "/api/orders/"


def make_settings(url: str, data_dir: Path, **overrides: object) -> ConnectorSettings:
    return ConnectorSettings(
        data_dir=data_dir,
        database_url=url,
        key_cache_seconds=0.05,
        **overrides,  # type: ignore[arg-type]
    )


def fresh_database(kind: str, tmp: Path) -> tuple[str, Callable[[], None]]:
    """A new, migrated, empty connector database: (URL, cleanup)."""
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp / 'connector.db'}"
        setup.upgrade_database(make_settings(url, tmp))
        return url, lambda: None
    name, url = pg.create_database("connector_test")
    setup.upgrade_database(make_settings(url, tmp))
    return url, lambda: pg.drop_database(name)


@pytest.fixture(scope="session", params=["sqlite", pg.ENGINE_NAME])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnectorSettings]:
    """Settings of a seeded database: DEMO_COUNT demo orders (ids 1..DEMO_COUNT)."""
    tmp = tmp_path_factory.mktemp(f"connector-{request.param}")
    url, cleanup = fresh_database(request.param, tmp)
    settings = make_settings(url, tmp)
    asyncio.run(setup.write_demo_orders(settings, DEMO_COUNT, seed=DEMO_SEED, reference=DEMO_REFERENCE))
    try:
        yield settings
    finally:
        cleanup()


@pytest.fixture(scope="session")
def api_key(backend: ConnectorSettings) -> str:
    return setup.create_key(backend, "contract-tests")


@pytest.fixture
def settings_for(backend: ConnectorSettings) -> Callable[..., ConnectorSettings]:
    """The backend's settings with some values changed (e.g. a low rate limit)."""

    def build(**overrides: object) -> ConnectorSettings:
        return backend.model_copy(update=overrides)

    return build


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """Build in-process clients of fresh connector apps (fast path on by default); closed after the test."""
    opened: list[tuple[ConnectorApp, httpx.AsyncClient]] = []

    def build(
        settings: ConnectorSettings, *, fast_path: bool = True, client: str = "127.0.0.1"
    ) -> httpx.AsyncClient:
        app = create_connector_app(settings, fast_path=fast_path)
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=(client, 50000)), base_url="http://connector"
        )
        opened.append((app, http))
        return http

    yield build
    for app, http in opened:
        await http.aclose()
        await app.aclose()


@pytest.fixture
async def client(
    make_client: Callable[..., httpx.AsyncClient], backend: ConnectorSettings
) -> httpx.AsyncClient:
    return make_client(backend)


@pytest.fixture
async def api_client(
    make_client: Callable[..., httpx.AsyncClient], backend: ConnectorSettings
) -> httpx.AsyncClient:
    """The FastAPI app alone (no fast path): the reference the fast path must match."""
    return make_client(backend, fast_path=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """The connector under uvicorn in a background thread, on a free loopback port."""

    def __init__(self, settings: ConnectorSettings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = setup.server_config(settings, "127.0.0.1", self.port)
        config.log_level = "warning"
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the connector did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def live_server(backend: ConnectorSettings) -> Iterator[LiveServer]:
    with LiveServer(backend.model_copy(update={"rate_limit": 0, "auth_failure_limit": 0})) as server:
        yield server
