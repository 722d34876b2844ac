"""Shared fixtures: a migrated database on SQLite and PostgreSQL, a rollback per test, the app, tokens."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from parley.app import create_app
from parley.config import Settings
from parley.connector import setup
from parley.connector.app import create_connector_app
from parley.connector.config import ConnectorSettings
from parley.kit.db import Database, create_engine
from parley.kit.orgcache import org_cache_of_database
from tests import migrated, pg
from tests.live import serve_in_thread

JWT_SECRET = "test-secret-" + "x" * 40

os.environ.setdefault("PARLEY_LOG_JSON", "false")
# Warming the offline recognizers holds the GIL for seconds per decoder: every app a test starts would
# stall its own event loop (and the audio another test is streaming) while it warms. Tests that are
# about the pool warm it themselves (tests/voice/test_german_offline.py).
os.environ.setdefault("PARLEY_VOICE_DECODER_POOL", "0")
# Decode in-process; tests/voice/test_decoder_processes.py starts its own decoder processes.
os.environ.setdefault("PARLEY_VOICE_DECODER_PROCESSES", "0")


def pytest_sessionfinish(session: pytest.Session) -> None:
    migrated.drop_templates()


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture parameters), which it keeps
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: files with a ``slow`` test first, then the rest by number of tests (most
    first); a file's tests keep their order.

    ``make test`` hands whole files to the workers in this order (``--dist loadfile
    --no-loadscope-reorder``). xdist's own order (most tests first) left the one-test files that take
    tens of seconds (subprocess CLIs, the cluster, the sustained-load and shutdown tests) to the end,
    where one worker ran them while the other had nothing left to do.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(
        files.values(), key=lambda tests: (not any(t.get_closest_marker("slow") for t in tests), -len(tests))
    )
    items[:] = [item for tests in ordered for item in tests]


@pytest.fixture(scope="session", params=["sqlite", pg.ENGINE_NAME])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A freshly migrated database: a SQLite file, or a new database on the local PostgreSQL."""
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path_factory.mktemp("db") / "parley.db")
        return
    name, url = migrated.postgres("parley_test")
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture(scope="session")
async def engine(db_url: str) -> AsyncIterator[Any]:
    engine = create_engine(db_url, pool_size=5)
    yield engine
    await engine.dispose()


@pytest.fixture
async def database(engine: Any) -> AsyncIterator[Database]:
    """Every request of a test runs in a savepoint of one outer transaction, rolled back at the end."""
    async with engine.connect() as connection:
        outer = await connection.begin()
        maker = async_sessionmaker(
            bind=connection, expire_on_commit=False, autoflush=False, join_transaction_mode="create_savepoint"
        )
        database = Database(engine=engine, sessionmaker=maker, write_sessionmaker=maker)
        yield database
        await outer.rollback()
        # What the test's rolled-back transaction put in the per-organization cache is gone with it.
        org_cache_of_database(database, distributed=False).clear()


@pytest.fixture
async def db_session(database: Database) -> AsyncIterator[AsyncSession]:
    async with database.sessionmaker() as session:
        yield session


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        admin_subjects=["root-admin"],
        log_json=False,
    )


@pytest.fixture
def app(settings: Settings, database: Database) -> Any:
    return create_app(settings, database=database)


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as client:
        yield client


@pytest.fixture(params=["sqlite", pg.ENGINE_NAME])
def committed_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A freshly migrated database of the test's own, whose writes commit (no outer transaction)."""
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path / "parley.db")
        return
    name, url = migrated.postgres("parley_committed")
    try:
        yield url
    finally:
        pg.drop_database(name)


@asynccontextmanager
async def committed_app(
    tmp_path: Path, url: str, **overrides: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Database, Any]]:
    """The app on ``url`` as ``parley serve`` runs it (its own ``Database``: row readers and writers
    included; ``overrides`` are settings), a client for it, and the app."""
    database = Database.from_url(url, pool_size=4)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        log_json=False,
        **overrides,
    )
    app = create_app(settings, database=database)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as client:
            yield client, database, app
    finally:
        await database.dispose()


@pytest.fixture
async def committed_platform(
    tmp_path: Path, committed_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Database]]:
    """The app on ``committed_url`` as ``parley serve`` runs it (see ``committed_app``), and a client."""
    async with committed_app(tmp_path, committed_url) as (client, database, _app):
        yield client, database


TokenFactory = Callable[..., str]


def make_token(sub: str = "alice", *, secret: str = JWT_SECRET, ttl: int = 3600, **claims: Any) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {"sub": sub, "iat": now, "exp": now + ttl, **claims}
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, secret, algorithm="HS256")


def auth(token: str, org: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if org:
        headers["X-Organization-Id"] = org
    return headers


@pytest.fixture
def token() -> TokenFactory:
    return make_token


@pytest.fixture(scope="session")
def connector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The real order connector over HTTP, with 20 demo orders and an API key."""
    tmp: Path = tmp_path_factory.mktemp("tools-connector")
    settings = ConnectorSettings(
        data_dir=tmp,
        database_url=f"sqlite+aiosqlite:///{tmp / 'connector.db'}",
        rate_limit=0,
        auth_failure_limit=0,
    )
    setup.upgrade_database(settings)
    asyncio.run(setup.write_demo_orders(settings, 20, seed=7, reference=date(2025, 6, 2)))
    key = setup.create_key(settings, "tools-tests")
    with serve_in_thread(create_connector_app(settings)) as url:
        yield {"url": url, "key": key}
