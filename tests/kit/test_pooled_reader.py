"""``kit.postgres.PooledReader``: one-row reads straight on asyncpg, answered as SQLAlchemy answers them.

Real parts: a fresh database on the local PostgreSQL, the platform's engine (``kit.db.create_engine``:
its pool, dialect, JSON codecs and types), the server ending a pooled connection's backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import bindparam, insert, literal_column, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.kit import db as kit_db
from parley.kit import postgres as kit_postgres
from parley.kit.db import create_engine
from parley.kit.postgres import PooledReader
from tests import pg
from tests.kit.test_inline_reader import BY_ID, ROWS, metadata


async def first(reader: PooledReader, statement: Any, parameters: dict[str, Any]) -> tuple[bool, Any]:
    """(whether the reader read, the first row or None)."""
    done, rows = await reader.rows(statement, parameters)
    return done, (rows[0] if rows else None)


async def primed(reader: PooledReader, *statements: Any) -> PooledReader:
    """A reader that has seen ``statements`` once: it prepares a statement at its second use (a
    first one it leaves to SQLAlchemy)."""
    for statement in statements:
        assert await reader.rows(statement, {}) == (False, [])
    return reader


@pytest.fixture
def database_url() -> Iterator[str]:
    name, url = pg.create_database("parley_pooled_reader")  # fails with CI=true when PostgreSQL is down
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=2)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(metadata.create_all)
            await connection.execute(insert(metadata.tables["things"]), ROWS)
        yield engine
    finally:
        await engine.dispose()


async def test_rows_are_what_sqlalchemy_reads(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), BY_ID)
    for row in ROWS:
        parameters = {"organization_id": row["organization_id"], "resource_id": row["id"]}
        async with engine.connect() as connection:
            expected = (await connection.execute(BY_ID, parameters)).first()
        done, found = await first(reader, BY_ID, parameters)
        assert done and found is not None and expected is not None
        assert found._asdict() == expected._asdict() == row
    assert await first(reader, BY_ID, {"organization_id": "org_b", "resource_id": "thg_1"}) == (True, None)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_the_server_ended_is_replaced(
    engine: AsyncEngine, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kit_db, "PING_AFTER_IDLE_S", 3600.0)  # the pool's idle ping must not find it first
    reader = await primed(PooledReader(engine), BY_ID)
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    assert (await first(reader, BY_ID, parameters))[0] is True  # the pool now holds that connection
    admin = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:  # ends every other backend of this database: the pooled connection's too
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    assert ended == 1
    # The reader's connection was ended: it is invalidated and the caller told to read the usual way.
    assert await first(reader, BY_ID, parameters) == (False, None)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with engine.connect() as connection:  # the usual way reads on
        assert (await connection.execute(BY_ID, parameters)).first() is not None
    assert (await first(reader, BY_ID, parameters))[0] is True


async def test_an_error_of_the_statement_is_left_to_the_usual_way(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), BY_ID)
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    async with engine.begin() as connection:
        await connection.execute(text("ALTER TABLE things RENAME TO gone"))
    assert await first(reader, BY_ID, parameters) == (False, None)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with engine.begin() as connection:
        await connection.execute(text("ALTER TABLE gone RENAME TO things"))
    assert (await first(reader, BY_ID, parameters))[0] is True


async def test_a_read_cancelled_halfway_leaves_no_busy_connection_in_the_pool(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), BY_ID)
    slow = select(literal_column("1").label("n")).select_from(text("pg_sleep(30)"))
    await primed(reader, slow)
    task = asyncio.create_task(first(reader, slow, {}))
    for _ in range(200):  # until the statement is running on the server
        await asyncio.sleep(0.05)
        async with engine.connect() as connection:
            running = (
                await connection.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30)%' AND pid <> pg_backend_pid()"
                    )
                )
            ).scalar_one()
        if running:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    # Every connection the pool hands out now is idle and usable.
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    for _ in range(3):
        assert (await first(reader, BY_ID, parameters))[0] is True


async def test_several_rows_in_order(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), BY_ID)
    things = metadata.tables["things"]
    listing = (
        select(things)
        .where(things.c.organization_id == bindparam("organization_id"))
        .order_by(things.c.id.desc())
    )
    await primed(reader, listing)
    async with engine.connect() as connection:
        expected = (await connection.execute(listing, {"organization_id": "org_a"})).all()
    done, rows = await reader.rows(listing, {"organization_id": "org_a"})
    assert done and [row._asdict() for row in rows] == [row._asdict() for row in expected] == ROWS[::-1]
    assert await reader.rows(listing, {"organization_id": "org_b"}) == (True, [])


async def test_a_connection_used_a_moment_ago_is_checked_out_without_a_greenlet(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = await primed(PooledReader(engine, ready=kit_db.needs_no_ping), BY_ID)
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    spawned: list[object] = []
    spawn = kit_postgres.greenlet_spawn

    async def counted(function: Any, *args: Any) -> Any:
        spawned.append(function)
        return await spawn(function, *args)

    monkeypatch.setattr(kit_postgres, "greenlet_spawn", counted)
    monkeypatch.setattr(kit_db, "PING_AFTER_IDLE_S", 3600.0)  # however loaded the machine: "a moment ago"
    assert (await first(reader, BY_ID, parameters))[0] is True
    spawned.clear()  # the connection has just been used and given back
    assert (await first(reader, BY_ID, parameters))[0] is True
    assert spawned == []
    # One that sat idle past the idle ping's threshold is checked out in a greenlet (the ping awaits).
    monkeypatch.setattr(kit_db, "PING_AFTER_IDLE_S", 0.0)
    assert (await first(reader, BY_ID, parameters))[0] is True
    assert len(spawned) == 1
