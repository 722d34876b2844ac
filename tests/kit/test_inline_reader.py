"""``kit.sqlite.InlineReader``: one-row reads on the event loop, answered as SQLAlchemy answers them.

Real parts: SQLite files, the platform's engine (``kit.db.create_engine``: its dialect, JSON
serializer and types), a second ``sqlite3`` connection holding locks where a case needs one.
"""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    insert,
    literal_column,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.kit.db import UTCDateTime, create_engine
from parley.kit.sqlite import InlineReader

metadata = MetaData()
things = Table(
    "things",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("organization_id", String(40), nullable=False),
    Column("name", Text),
    Column("count", Integer),
    Column("enabled", Boolean),
    Column("ratio", Float),
    Column("config", JSON),
    Column("created_at", UTCDateTime()),
)
BY_ID = select(things).where(
    things.c.organization_id == bindparam("organization_id"), things.c.id == bindparam("resource_id")
)
ROWS = [
    {
        "id": "thg_1",
        "organization_id": "org_a",
        "name": "Werkstatt Süd",
        "count": 3,
        "enabled": True,
        "ratio": 0.25,
        "config": {"greeting": "Grüß Gott", "numbers": [1, 2.5, None], "nested": {"ok": False}},
        "created_at": datetime(2026, 11, 29, 8, 30, 15, 123456, tzinfo=UTC),
    },
    {
        "id": "thg_2",
        "organization_id": "org_a",
        "name": None,
        "count": None,
        "enabled": False,
        "ratio": None,
        "config": None,
        "created_at": None,
    },
]


def first(reader: InlineReader, statement: Any, parameters: dict[str, Any]) -> tuple[bool, Any]:
    """(whether the reader read, the first row or None)."""
    done, rows = reader.rows(statement, parameters)
    return done, (rows[0] if rows else None)


def primed(reader: InlineReader, *statements: Any) -> InlineReader:
    """A reader that has seen ``statements`` once: it prepares a statement at its second use (a
    first one it leaves to SQLAlchemy)."""
    for statement in statements:
        assert reader.rows(statement, {}) == (False, [])
    return reader


@pytest.fixture
async def database(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'inline.db'}"
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(metadata.create_all)
        await connection.execute(insert(things), ROWS)
    await engine.dispose()
    return url


@pytest.fixture
async def engine_and_reader(database: str) -> AsyncIterator[tuple[AsyncEngine, InlineReader]]:
    """The platform's engine on ``database`` and an inline reader beside it, closed afterwards."""
    engine = create_engine(database)
    reader = InlineReader.for_url(engine.url, engine.dialect)
    assert reader is not None
    try:
        yield engine, reader
    finally:
        reader.close()
        await engine.dispose()


async def test_rows_are_what_sqlalchemy_reads(engine_and_reader: tuple[AsyncEngine, InlineReader]) -> None:
    engine, reader = engine_and_reader
    primed(reader, BY_ID)
    for row in ROWS:
        parameters = {"organization_id": row["organization_id"], "resource_id": row["id"]}
        async with engine.connect() as connection:
            expected = (await connection.execute(BY_ID, parameters)).first()
        done, found = first(reader, BY_ID, parameters)
        assert done and found is not None and expected is not None
        assert tuple(found) == tuple(expected)
        assert found._asdict() == expected._asdict() == row
        assert type(found.created_at) is type(expected.created_at)
    # Scoped by organization: another organization's id reads nothing.
    assert first(reader, BY_ID, {"organization_id": "org_b", "resource_id": "thg_1"}) == (True, None)


def test_no_reader_for_an_in_memory_database() -> None:
    engine_dialect = create_engine("sqlite+aiosqlite://").dialect
    for url in (
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite:///file:x?mode=memory&uri=true",
    ):
        assert InlineReader.for_url(make_url(url), engine_dialect) is None


async def test_a_read_that_would_wait_for_a_lock_gives_way(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")  # not WAL: an exclusive lock keeps readers out
    holder.execute("CREATE TABLE things (id TEXT PRIMARY KEY, organization_id TEXT)")
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    reader = InlineReader.for_url(engine.url, engine.dialect)
    assert reader is not None
    small = select(things.c.id).where(
        things.c.organization_id == bindparam("organization_id"), things.c.id == bindparam("resource_id")
    )
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    primed(reader, small)
    try:
        assert first(reader, small, parameters) == (True, None)
        holder.execute("BEGIN EXCLUSIVE")
        assert first(reader, small, parameters) == (False, None)  # busy: the caller reads the usual way
        holder.execute("ROLLBACK")
        assert first(reader, small, parameters) == (True, None)
    finally:
        reader.close()
        holder.close()
        await engine.dispose()


async def test_a_read_past_its_budget_gives_way(engine_and_reader: tuple[AsyncEngine, InlineReader]) -> None:
    _engine, reader = engine_and_reader
    # Counts to a hundred million before answering: far past the 2 ms budget on any machine.
    endless = select(literal_column("n")).select_from(
        text(
            "(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 100000000) "
            "SELECT max(n) AS n FROM c)"
        )
    )
    primed(reader, endless, BY_ID)
    assert first(reader, endless, {}) == (False, None)
    # The connection is still good for the next read.
    assert first(reader, BY_ID, {"organization_id": "org_a", "resource_id": "thg_2"})[0] is True


async def test_a_reader_in_use_elsewhere_gives_way(
    engine_and_reader: tuple[AsyncEngine, InlineReader],
) -> None:
    _engine, reader = engine_and_reader
    parameters = {"organization_id": "org_a", "resource_id": "thg_1"}
    primed(reader, BY_ID)
    reader._in_use.acquire()  # another thread's read
    assert first(reader, BY_ID, parameters) == (False, None)
    reader._in_use.release()
    assert first(reader, BY_ID, parameters)[0] is True


async def test_several_rows_in_order(engine_and_reader: tuple[AsyncEngine, InlineReader]) -> None:
    engine, reader = engine_and_reader
    listing = (
        select(things)
        .where(things.c.organization_id == bindparam("organization_id"))
        .order_by(things.c.id.desc())
    )
    primed(reader, listing)
    async with engine.connect() as connection:
        expected = (await connection.execute(listing, {"organization_id": "org_a"})).all()
    done, rows = reader.rows(listing, {"organization_id": "org_a"})
    assert done and [row._asdict() for row in rows] == [row._asdict() for row in expected] == ROWS[::-1]
    assert reader.rows(listing, {"organization_id": "org_b"}) == (True, [])


async def test_one_off_statements_are_not_kept(engine_and_reader: tuple[AsyncEngine, InlineReader]) -> None:
    _engine, reader = engine_and_reader
    for _ in range(3):  # a statement built for one request, read twice, then dropped
        one_off = select(things.c.id).where(things.c.id == bindparam("resource_id"))
        assert reader.rows(one_off, {"resource_id": "thg_1"})[0] is False  # first use: SQLAlchemy's
        assert reader.rows(one_off, {"resource_id": "thg_1"}) == (True, [("thg_1",)])
        del one_off
    gc.collect()
    assert len(reader._prepared._prepared) == 0 and len(reader._prepared._seen) == 0
