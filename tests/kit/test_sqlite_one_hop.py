"""The SQLite driver adapter (parley.kit.sqlite): same transactions and errors as aiosqlite, fewer hops.

Real database files, two engines on one file where locking matters. Hops are counted by wrapping the
connection's thread hand-off, which is the adapter's contract: a read-only transaction makes none.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.kit import sqlite as one_hop
from parley.kit.db import Timeouts, create_engine


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT UNIQUE)"))
    yield engine
    await engine.dispose()


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []
    original = one_hop.OneHopConnection.on_thread

    async def counted(self: one_hop.OneHopConnection, function: Any, *args: Any) -> Any:
        seen.append(getattr(function, "__name__", repr(function)))
        return await original(self, function, *args)

    monkeypatch.setattr(one_hop.OneHopConnection, "on_thread", counted)
    yield seen


async def test_the_engine_uses_the_adapter(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert isinstance(raw.driver_connection, one_hop.OneHopConnection)


async def test_a_read_only_transaction_makes_no_thread_hop(engine: AsyncEngine, hops: list[str]) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (1, 'a')"))
    hops.clear()
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT id, v FROM t WHERE id = :id"), {"id": 1})).all()
        await conn.commit()
    assert [tuple(r) for r in rows] == [(1, "a")]
    assert hops == []


async def test_a_write_is_one_hop_with_its_begin_and_one_for_its_commit(
    engine: AsyncEngine, hops: list[str]
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (2, 'b')"))
    assert hops == ["_run", "commit"]
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT v FROM t WHERE id = 2"))).scalar_one() == "b"


async def test_rollback_discards_writes_and_errors_keep_their_types(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (3, 'c')"))
        await conn.rollback()
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (4, 'd')"))
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (id, v) VALUES (5, 'd')"))
    with pytest.raises(OperationalError):
        async with engine.connect() as conn:
            await conn.execute(text("SELECT nope FROM t"))
    async with engine.connect() as conn:
        ids = (await conn.execute(text("SELECT id FROM t ORDER BY id"))).scalars().all()
    assert ids == [4]


async def test_savepoints_roll_back_only_their_part(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (6, 'e')"))
        nested = await conn.begin_nested()
        await conn.execute(text("INSERT INTO t (id, v) VALUES (7, 'f')"))
        await nested.rollback()
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT id FROM t ORDER BY id"))).scalars().all() == [6]


async def test_a_read_sees_one_snapshot_for_its_whole_transaction(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (8, 'g')"))
    async with engine.connect() as reader:
        first = (await reader.execute(text("SELECT count(*) FROM t"))).scalar_one()
        async with engine.begin() as writer:
            await writer.execute(text("INSERT INTO t (id, v) VALUES (9, 'h')"))
        again = (await reader.execute(text("SELECT count(*) FROM t"))).scalar_one()
        await reader.commit()
        after = (await reader.execute(text("SELECT count(*) FROM t"))).scalar_one()
    assert (first, again, after) == (1, 1, 2)


async def test_a_long_read_moves_to_the_thread_and_still_answers(
    engine: AsyncEngine, hops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(one_hop, "INLINE_BUDGET_S", 0.0)  # every read is over budget
    counting = text(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) SELECT count(*) FROM n"
    )
    async with engine.connect() as conn:
        assert (await conn.execute(counting)).scalar_one() == 200000
        await conn.commit()
    assert hops[0] == "_run"


async def test_a_read_while_another_connection_writes_neither_waits_nor_fails(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    try:
        async with other.begin() as writer:
            await writer.execute(text("INSERT INTO t (id, v) VALUES (10, 'i')"))  # holds the write lock
            async with engine.connect() as reader:
                seen = (await reader.execute(text("SELECT count(*) FROM t"))).scalar_one()
                await reader.commit()
            assert seen == 0  # WAL: the reader sees the last commit, without waiting
    finally:
        await other.dispose()


async def test_writers_on_two_connections_wait_for_each_other(engine: AsyncEngine, tmp_path: Path) -> None:
    writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
    order: list[str] = []

    async def write(value: int, hold: float) -> None:
        async with writer_engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (id, v) VALUES (:i, :v)"), {"i": value, "v": str(value)})
            order.append(f"in {value}")
            await asyncio.sleep(hold)
            order.append(f"out {value}")

    await asyncio.gather(write(11, 0.2), write(12, 0.0))
    assert order in (["in 11", "out 11", "in 12", "out 12"], ["in 12", "out 12", "in 11", "out 11"])
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2


async def test_one_row_writes_under_the_write_lock_make_no_hop(engine: AsyncEngine, hops: list[str]) -> None:
    writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
    async with writer_engine.begin() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (20, 'x')"))  # takes the lock: the thread
        await conn.execute(text("INSERT INTO t (id, v) VALUES (:i, :v)"), {"i": 21, "v": "y"})
        await conn.execute(text("UPDATE t SET v=:v WHERE t.id = :i"), {"v": "z", "i": 20})
        assert hops == ["_run"]
        await conn.execute(text("UPDATE t SET v=:v WHERE t.v = :old"), {"v": "w", "old": "y"})  # many rows
    assert hops == ["_run", "_run", "commit"]
    async with engine.connect() as conn:
        rows = (await conn.execute(text("SELECT id, v FROM t ORDER BY id"))).all()
    assert [tuple(r) for r in rows] == [(20, "z"), (21, "w")]


async def test_a_failing_write_under_the_lock_rolls_back_cleanly(engine: AsyncEngine) -> None:
    writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
    with pytest.raises(IntegrityError):
        async with writer_engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (id, v) VALUES (30, 'dup')"))
            await conn.execute(text("INSERT INTO t (id, v) VALUES (:i, :v)"), {"i": 31, "v": "dup"})
    async with writer_engine.begin() as conn:  # the lock was given back: the next writer goes ahead
        await conn.execute(text("INSERT INTO t (id, v) VALUES (32, 'ok')"))
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT id FROM t ORDER BY id"))).scalars().all() == [32]


async def test_a_savepoint_does_not_count_as_holding_the_write_lock(
    engine: AsyncEngine, hops: list[str]
) -> None:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT count(*) FROM t"))  # a deferred read transaction
        nested = await conn.begin_nested()  # SAVEPOINT ... RELEASE: no lock taken
        await nested.commit()
        hops.clear()
        # The first write must take SQLite's lock itself, on the thread (it may wait), not on the loop.
        await conn.execute(text("INSERT INTO t (id, v) VALUES (51, 'r')"))
        assert hops == ["_run_upgrading"]  # the transaction had only read: see the tests below
        await conn.execute(text("INSERT INTO t (id, v) VALUES (:i, :v)"), {"i": 52, "v": "s"})  # lock held
        assert hops == ["_run_upgrading"]
        await conn.commit()
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2


async def test_a_write_after_reads_on_the_loop_still_waits_for_the_lock(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Reads on the event loop run with no busy time-out; a write on the thread gets it back, so it waits
    for another connection's write lock instead of failing with 'database is locked'."""
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    lock_held, release = asyncio.Event(), asyncio.Event()

    async def hold_lock() -> None:
        async with other.begin() as conn:
            await conn.execute(text("INSERT INTO t (id, v) VALUES (21, 'held')"))
            lock_held.set()
            await release.wait()

    try:
        async with engine.connect() as conn:
            for _ in range(3):  # reads on the loop: busy time-out 0 meanwhile
                await conn.execute(text("SELECT count(*) FROM t"))
            await conn.commit()
            holder = asyncio.create_task(hold_lock())
            await lock_held.wait()
            asyncio.get_running_loop().call_later(0.3, release.set)
            # The same connection writes: on the thread, waiting for the other's lock.
            await conn.execute(text("INSERT INTO t (id, v) VALUES (22, 'waited')"))
            await conn.commit()
            await holder
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2
    finally:
        await other.dispose()


async def test_an_expired_read_budget_never_interrupts_the_busy_time_out_switch(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget's progress handler is set only after the busy time-out is switched: the switch (a
    PRAGMA) must never be interrupted by a read's budget. CI once saw 'interrupted' from the PRAGMA
    itself on a loaded machine, outside the read's fallback to the thread."""
    monkeypatch.setattr(one_hop, "INLINE_BUDGET_S", -1.0)  # every read is over budget at once
    monkeypatch.setattr(one_hop, "BUDGET_CHECK_STEPS", 1)  # and the budget is looked at every step
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO t (id, v) VALUES (31, 'thread')"))  # on the thread
        await conn.commit()
        # The read switches the busy time-out to 0 (a PRAGMA), then runs out of budget at once and
        # goes on on the thread.
        assert (await conn.execute(text("SELECT v FROM t WHERE id = 31"))).scalar_one() == "thread"


async def test_a_first_write_after_another_connection_committed_takes_the_lock_instead_of_failing(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """A deferred transaction that read, then writes after another connection committed: SQLite refuses
    the stale snapshot (SQLITE_BUSY_SNAPSHOT, whatever the busy time-out); the adapter takes the lock
    in a new transaction and writes, as PostgreSQL's read committed would. A GET that notes an API key's
    use did exactly this and answered 503 when another request committed in between."""
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    try:
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t (id, v) VALUES (60, 'seen')"))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 1  # snapshot taken
            async with other.begin() as writer:
                await writer.execute(text("INSERT INTO t (id, v) VALUES (61, 'meanwhile')"))
            await conn.execute(text("UPDATE t SET v = 'noted' WHERE id = 60"))
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 2  # the new snapshot
            await conn.commit()
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id, v FROM t ORDER BY id"))).all()
        assert [tuple(r) for r in rows] == [(60, "noted"), (61, "meanwhile")]
    finally:
        await other.dispose()


async def test_the_restarted_transaction_opens_the_same_savepoints_again(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """A first-seen user is inserted in a savepoint of authentication's read transaction: after the
    restart the savepoint is open again, so rolling back to it and releasing it still work."""
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT count(*) FROM t"))
            outer = await conn.begin_nested()
            inner = await conn.begin_nested()
            await inner.commit()  # released: not opened again
            async with other.begin() as writer:
                await writer.execute(text("INSERT INTO t (id, v) VALUES (70, 'meanwhile')"))
            await conn.execute(text("INSERT INTO t (id, v) VALUES (71, 'undone')"))
            await outer.rollback()  # ROLLBACK TO the savepoint opened again, then RELEASE
            await conn.execute(text("INSERT INTO t (id, v) VALUES (72, 'kept')"))
            await conn.commit()
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT id FROM t ORDER BY id"))).scalars().all() == [70, 72]
    finally:
        await other.dispose()


async def test_a_write_that_fails_after_the_restart_keeps_its_error(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", timeouts=Timeouts(busy=5.0))
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT count(*) FROM t"))
            async with other.begin() as writer:
                await writer.execute(text("INSERT INTO t (id, v) VALUES (80, 'taken')"))
            with pytest.raises(IntegrityError):  # the new snapshot sees the other's row
                await conn.execute(text("INSERT INTO t (id, v) VALUES (81, 'taken')"))
            await conn.rollback()
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT id FROM t ORDER BY id"))).scalars().all() == [80]
    finally:
        await other.dispose()


def test_busy_kinds_are_told_apart_by_their_primary_code(tmp_path: Path) -> None:
    """Python reports SQLite's extended result codes (SQLITE_BUSY_SNAPSHOT is 517, not SQLITE_BUSY's 5);
    a read on the event loop that meets any kind of busy must go on on the thread, not fail (a rare
    SQLITE_BUSY_RECOVERY under load answered 503)."""
    path = tmp_path / "codes.db"
    first = sqlite3.connect(path, isolation_level=None)
    second = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        first.execute("PRAGMA journal_mode=WAL")
        first.execute("CREATE TABLE t (x)")
        second.execute("BEGIN")
        second.execute("SELECT * FROM t").fetchall()
        first.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(sqlite3.OperationalError) as refused:
            second.execute("INSERT INTO t VALUES (2)")
    finally:
        first.close()
        second.close()
    assert refused.value.sqlite_errorcode == sqlite3.SQLITE_BUSY_SNAPSHOT
    assert one_hop._primary_code(refused.value) == sqlite3.SQLITE_BUSY
    assert one_hop._primary_code(refused.value) in one_hop._GIVE_WAY
    recovering = sqlite3.OperationalError("database is locked")
    recovering.sqlite_errorcode = sqlite3.SQLITE_BUSY_RECOVERY
    assert one_hop._primary_code(recovering) in one_hop._GIVE_WAY


async def test_begin_is_deferred_unless_the_engine_asks_for_immediate(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """The dialect sends BEGIN DEFERRED (a read takes no write lock); an engine with the execution option
    sqlite_begin="IMMEDIATE" takes the write lock with its first statement, even a read."""

    def lock_is_free() -> bool:
        other = sqlite3.connect(tmp_path / "one.db", timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            other.close()

    async with engine.connect() as conn:
        await conn.execute(text("SELECT count(*) FROM t"))
        assert conn.in_transaction() and lock_is_free()
        await conn.execute(text("INSERT INTO t (id, v) VALUES (40, 'd')"))
        assert not lock_is_free()  # the write took it, in the same transaction
        await conn.rollback()
    writer_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
    async with writer_engine.connect() as conn:
        await conn.execute(text("SELECT count(*) FROM t"))
        assert not lock_is_free()
        await conn.rollback()
    assert lock_is_free()
    async with engine.connect() as conn:  # the option stays with its engine
        await conn.execute(text("SELECT count(*) FROM t"))
        assert lock_is_free()
        assert (await conn.execute(text("SELECT count(*) FROM t WHERE id = 40"))).scalar_one() == 0
