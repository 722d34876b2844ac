"""The fair connection pool (parley.kit.pool): a connection given back goes to the request that has
waited longest, never to one that asks later; time-outs and cancelled waits lose no connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import exc, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from parley.kit.db import create_engine
from parley.kit.pool import FairAsyncAdaptedQueuePool


@pytest.fixture
async def one_connection(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}", pool_size=1, pool_timeout=0.2)
    assert isinstance(engine.pool, FairAsyncAdaptedQueuePool)
    yield engine
    await engine.dispose()


async def test_a_connection_given_back_goes_to_the_first_waiting(one_connection: AsyncEngine) -> None:
    engine = one_connection
    order: list[str] = []

    async def use(name: str) -> None:
        async with engine.connect() as conn:
            order.append(name)
            await conn.execute(text("SELECT 1"))

    holder = await engine.connect()
    await holder.execute(text("SELECT 1"))
    waiting = asyncio.create_task(use("waited"))
    await asyncio.sleep(0.01)  # it is in line now
    await holder.close()
    # Asks right after the connection came back, before the waiting request has run again: with
    # SQLAlchemy's own queue it would take the connection, and the waiting one would wait once more.
    await use("came later")
    await waiting
    assert order == ["waited", "came later"]


async def test_a_wait_that_times_out_loses_no_connection(one_connection: AsyncEngine) -> None:
    engine = one_connection
    holder = await engine.connect()
    await holder.execute(text("SELECT 1"))
    with pytest.raises(exc.TimeoutError):  # the pool's own error after pool_timeout, as before
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    cancelled = asyncio.create_task(engine.connect().start())
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await holder.close()
    async with engine.connect() as conn:  # the one connection is still there for the next request
        assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def _pooled_idle(engine: AsyncEngine) -> FairAsyncAdaptedQueuePool:
    async with engine.connect() as conn:  # one connection made, used and given back
        await conn.execute(text("SELECT 1"))
    pool = engine.sync_engine.pool
    assert isinstance(pool, FairAsyncAdaptedQueuePool) and pool.checkedin() == 1
    return pool


async def test_an_idle_connection_is_checked_out_at_once_outside_a_greenlet(
    one_connection: AsyncEngine,
) -> None:
    pool = await _pooled_idle(one_connection)
    # Called from plain async code: a check-out that had to await the driver would raise MissingGreenlet.
    fairy = pool.connect_at_once(lambda _record: True)
    assert fairy is not None and pool.checkedout() == 1
    assert pool.connect_at_once(lambda _record: True) is None  # none idle now: the caller must wait
    fairy.close()
    assert pool.checkedin() == 1
    assert pool.connect_at_once(lambda _record: False) is None  # a listener would need I/O for it


async def test_recycled_or_invalidated_connections_are_left_to_the_greenlet(tmp_path: Path) -> None:
    recycling = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'recycle.db'}", poolclass=FairAsyncAdaptedQueuePool, pool_recycle=0
    )
    try:
        pool = await _pooled_idle(recycling)
        await asyncio.sleep(0.01)  # older than its recycling age now
        assert pool.connect_at_once(lambda _record: True) is None
    finally:
        await recycling.dispose()
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'soft.db'}", poolclass=FairAsyncAdaptedQueuePool
    )
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            await conn.invalidate(exception=None)  # hard: the connection is closed with it
        pool = engine.sync_engine.pool
        assert pool.connect_at_once(lambda _record: True) is None
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            raw = await conn.get_raw_connection()
            raw.invalidate(soft=True)  # replaced at its next check-out
        assert pool.connect_at_once(lambda _record: True) is None
    finally:
        await engine.dispose()
