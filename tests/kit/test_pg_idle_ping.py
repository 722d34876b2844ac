"""PostgreSQL pool: a connection that sat idle is pinged before use and replaced when its server
process is gone (parley.kit.db._ping_idle_connections); a busy connection is not pinged."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.kit import db
from parley.kit.db import create_engine
from tests import pg


@pytest.fixture
def pg_database() -> Iterator[str]:
    name, url = pg.create_database("parley_ping")
    yield url
    pg.drop_database(name)


@pytest.fixture
async def engine(pg_database: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(pg_database, pool_size=1)
    yield engine
    await engine.dispose()


async def _backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        pid = int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
        await conn.commit()
    return pid


async def _terminate(pid: int) -> None:
    admin = await asyncpg.connect(pg.ADMIN_DSN)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def test_an_idle_connection_whose_server_died_is_replaced(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await _backend_pid(engine)
    await _terminate(first)
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)  # the pooled connection counts as idle
    second = await _backend_pid(engine)  # no error: the ping failed and the pool made a new one
    assert second != first


async def test_a_connection_in_steady_use_is_not_pinged(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 3600.0)  # every checkout counts as steady use
    first = await _backend_pid(engine)
    await _terminate(first)
    # Not pinged: the statement meets the dead connection, fails as a disconnect (503 on the API) and
    # the pool is invalidated, so the next checkout connects anew.
    with pytest.raises(DBAPIError) as failure:
        await _backend_pid(engine)
    assert failure.value.connection_invalidated
    assert await _backend_pid(engine) != first
