"""The fair connection pool (parley.kit.pool): a connection given back goes to the request that has
waited longest, never to one that asks later; time-outs and cancelled waits lose no connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import exc, text
from sqlalchemy.ext.asyncio import AsyncEngine

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
