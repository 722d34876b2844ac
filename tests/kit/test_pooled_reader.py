"""``kit.postgres.PooledReader``: one-row reads straight on asyncpg, answered as SQLAlchemy answers them.

Real parts: a fresh database on the local PostgreSQL, the platform's engine (``kit.db.create_engine``:
its pool, dialect, JSON codecs and types), the server ending a pooled connection's backend.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import bindparam, insert, literal_column, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.kit import db as kit_db
from parley.kit import postgres as kit_postgres
from parley.kit.db import create_engine
from parley.kit.postgres import PooledReader, coalesced
from parley.kit.prepared import PreparedRead, one_row
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


# --- concurrent reads of a one-row statement, coalesced ------------------------------------------

ONE_BY_ID = one_row(BY_ID)


def asked(organization_id: str, resource_id: str) -> dict[str, str]:
    return {"organization_id": organization_id, "resource_id": resource_id}


def expected_rows(parameters: dict[str, str]) -> list[dict[str, Any]]:
    return [
        row
        for row in ROWS
        if row["organization_id"] == parameters["organization_id"] and row["id"] == parameters["resource_id"]
    ]


async def test_concurrent_reads_are_coalesced_and_each_answered_with_its_own_rows(
    engine: AsyncEngine,
) -> None:
    reader = await primed(PooledReader(engine), ONE_BY_ID)
    assert reader.max_in_flight == 1  # half the pool of 2
    # Both organizations ask for both rows (and one that does not exist): org_b's reads share queries
    # with org_a's and must find nothing; 1 read goes at once, the next 37 leave as 2 queries (32 + 5,
    # the last padded to 6).
    reads = [asked(org, thing) for org in ("org_a", "org_b") for thing in ("thg_1", "thg_2", "thg_9")] * 6 + [
        asked("org_a", "thg_2"),
        asked("org_a", "thg_1"),
    ]
    answers = await asyncio.gather(*(reader.rows(ONE_BY_ID, parameters) for parameters in reads))
    for parameters, (done, rows) in zip(reads, answers, strict=True):
        assert done
        assert [row._asdict() for row in rows] == expected_rows(parameters), parameters
    assert reader.queries == 2
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_coalesced_read_sees_what_was_committed_before_it_asked(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), ONE_BY_ID)
    things = metadata.tables["things"]
    for count in (10, 11, 12):
        async with engine.begin() as connection:
            await connection.execute(update(things).where(things.c.id == "thg_1").values(count=count))
        answers = await asyncio.gather(*(reader.rows(ONE_BY_ID, asked("org_a", "thg_1")) for _ in range(8)))
        assert [rows[0].count for _done, rows in answers] == [count] * 8
    assert reader.queries == 3


async def test_a_statement_not_marked_one_row_is_never_coalesced(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), BY_ID)
    answers = await asyncio.gather(*(reader.rows(BY_ID, asked("org_a", "thg_2")) for _ in range(6)))
    assert all(done and [row.id for row in rows] == ["thg_2"] for done, rows in answers)
    assert reader.queries == 0


async def test_a_failing_coalesced_query_sends_every_read_the_usual_way(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), ONE_BY_ID)
    async with engine.begin() as connection:
        await connection.execute(text("ALTER TABLE things RENAME TO gone"))
    answers = await asyncio.gather(*(reader.rows(ONE_BY_ID, asked("org_a", "thg_1")) for _ in range(5)))
    assert answers == [(False, [])] * 5
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    async with engine.begin() as connection:
        await connection.execute(text("ALTER TABLE gone RENAME TO things"))
    answers = await asyncio.gather(*(reader.rows(ONE_BY_ID, asked("org_a", "thg_1")) for _ in range(5)))
    assert all(done and rows[0].id == "thg_1" for done, rows in answers)


async def test_a_waiting_read_whose_caller_gave_up_leaves_the_others_answered(engine: AsyncEngine) -> None:
    reader = await primed(PooledReader(engine), ONE_BY_ID)
    reads = [asked("org_a", thing) for thing in ("thg_1", "thg_2", "thg_1", "thg_2", "thg_1")]
    tasks = [asyncio.create_task(reader.rows(ONE_BY_ID, parameters)) for parameters in reads]
    await asyncio.sleep(0)  # the first is sent, the others wait for the next query
    tasks[2].cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[2], asyncio.CancelledError)
    for index in (0, 1, 3, 4):
        done, rows = results[index]  # type: ignore[misc]
        assert done and [row.id for row in rows] == [reads[index]["resource_id"]]
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_sender_cancelled_before_it_ran_leaves_no_read_waiting(engine: AsyncEngine) -> None:
    # As a loop shutting down cancels its tasks: the waiting read is sent the usual way, and the
    # reader's count of queries in flight is whole again.
    reader = await primed(PooledReader(engine, max_in_flight=2), ONE_BY_ID)
    sent = asyncio.create_task(reader.rows(ONE_BY_ID, asked("org_a", "thg_1")))
    waiting = asyncio.create_task(reader.rows(ONE_BY_ID, asked("org_a", "thg_2")))
    await asyncio.sleep(0)  # the first read is sent; the second waits for a sender not yet run
    (sender,) = reader._senders
    sender.cancel()
    (done, rows), gave_way = await asyncio.gather(sent, waiting)
    assert done and rows[0].id == "thg_1"
    assert gave_way == (False, [])
    answers = await asyncio.gather(*(reader.rows(ONE_BY_ID, asked("org_a", "thg_2")) for _ in range(5)))
    assert all(done and rows[0].id == "thg_2" for done, rows in answers)
    assert reader.queries == 1
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_coalesced_query_numbers_each_reads_parameters_after_the_ones_before(engine: AsyncEngine) -> None:
    prepared = PreparedRead(ONE_BY_ID, engine.dialect)
    assert prepared.one_row and not PreparedRead(BY_ID, engine.dialect).one_row
    sql = coalesced(prepared, 3)
    assert sql is not None
    assert sql.count(" UNION ALL ") == 2
    assert [int(n) for n in re.findall(r"\$(\d+)", sql)] == [1, 2, 3, 4, 5, 6]
    assert sql.endswith("AS parley_branch_2")
