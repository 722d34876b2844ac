"""The PostgreSQL read path: coalesced lookups, fresh answers, and outages answered 503, never a hang.

Each test gets a database of its own (it locks, updates and closes it to connections).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest

from parley.connector import setup
from parley.connector.config import ConnectorSettings
from parley.connector.errors import StoreUnavailable
from parley.connector.repository import PostgresOrderStore
from tests import pg
from tests.connector.conftest import ORDER_BASE, fresh_database, make_settings

ORDER_COUNT = 40
HANG_GUARD = 60.0  # seconds: only ever reached when something hangs


@pytest.fixture
def pg_settings(tmp_path: Path) -> Iterator[ConnectorSettings]:
    url, cleanup = fresh_database(pg.ENGINE_NAME, tmp_path)
    settings = make_settings(url, tmp_path)
    asyncio.run(setup.write_demo_orders(settings, ORDER_COUNT, seed=3))
    try:
        yield settings
    finally:
        cleanup()


def database_name(settings: ConnectorSettings) -> str:
    return settings.asyncpg_dsn.rsplit("/", 1)[1]


async def stored_payloads(settings: ConnectorSettings) -> dict[int, bytes]:
    conn = await asyncpg.connect(settings.asyncpg_dsn)
    try:
        rows = await conn.fetch("SELECT id, payload FROM connector_orders")
    finally:
        await conn.close()
    return {row["id"]: row["payload"] for row in rows}


async def wait_for_blocked_query(admin: asyncpg.Connection, database: str) -> None:
    """Return once a query of ``database`` waits for a lock (polls; the guard only catches a hang)."""
    async with asyncio.timeout(HANG_GUARD):
        while not await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
            database,
        ):
            await asyncio.sleep(0.01)


async def test_concurrent_lookups_share_queries_and_each_gets_its_own_order(
    pg_settings: ConnectorSettings,
) -> None:
    expected = await stored_payloads(pg_settings)
    store = PostgresOrderStore(pg_settings)
    try:
        assert await store.payload(5) == expected[5]
        assert store.queries == 1  # a lone lookup is sent at once, on its own

        # Repeated ids, every stored id and ids that do not exist, all waiting at the same time.
        ids = [i % (ORDER_COUNT + 10) + 1 for i in range(300)]
        results = await asyncio.wait_for(asyncio.gather(*(store.payload(i) for i in ids)), HANG_GUARD)
        assert results == [expected.get(i) for i in ids]
        assert 1 < store.queries <= 5  # 300 lookups coalesced into a few queries
    finally:
        await store.close()


async def test_a_lookup_never_joins_a_query_already_sent(pg_settings: ConnectorSettings) -> None:
    """A lookup arriving while a query for the same id is in flight waits for a query of its own, so
    an update committed before it arrived is always seen."""
    store = PostgresOrderStore(
        pg_settings.model_copy(update={"pg_pool_size": 2})
    )  # one lookup query at a time
    admin = await asyncpg.connect(pg_settings.asyncpg_dsn)
    updated = orjson.dumps({"id": 1, "note": "updated"})
    try:
        await store.open()
        locked = admin.transaction()
        await locked.start()
        await admin.execute("LOCK TABLE connector_orders IN ACCESS EXCLUSIVE MODE")
        first = asyncio.create_task(store.payload(1))
        await wait_for_blocked_query(admin, database_name(pg_settings))
        second = asyncio.create_task(store.payload(1))
        await asyncio.sleep(0)  # one loop step: the second lookup queues (a ready task runs in order)
        assert not second.done()
        await admin.execute("UPDATE connector_orders SET payload = $1 WHERE id = 1", updated)
        await locked.commit()
        await asyncio.wait_for(first, HANG_GUARD)
        assert await asyncio.wait_for(second, HANG_GUARD) == updated
        assert store.queries == 2
    finally:
        await admin.close()
        await store.close()


async def test_a_cancelled_request_does_not_disturb_the_others(pg_settings: ConnectorSettings) -> None:
    expected = await stored_payloads(pg_settings)
    store = PostgresOrderStore(pg_settings)
    try:
        tasks = [asyncio.create_task(store.payload(i)) for i in range(1, 11)]
        await asyncio.sleep(0)  # one loop step: every lookup is queued, none answered yet
        tasks[3].cancel()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG_GUARD)
        assert isinstance(results[3], asyncio.CancelledError)
        assert [r for n, r in enumerate(results) if n != 3] == [expected[i] for i in range(1, 11) if i != 4]
    finally:
        await store.close()


async def test_a_query_stuck_behind_a_lock_answers_503(
    pg_settings: ConnectorSettings, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """A database that accepts the query but never answers it: 503 after the command timeout (5 s)."""
    key = await asyncio.to_thread(setup.create_key, pg_settings, "lock-test")
    http = make_client(pg_settings)
    admin = await asyncpg.connect(pg_settings.asyncpg_dsn)
    try:
        assert (await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": key})).status_code == 200
        async with admin.transaction():
            await admin.execute("LOCK TABLE connector_orders IN ACCESS EXCLUSIVE MODE")
            response = await asyncio.wait_for(
                http.get(f"{ORDER_BASE}2", headers={"X-API-Key": key}), HANG_GUARD
            )
            assert response.status_code == 503
            assert response.json() == orjson.loads(StoreUnavailable().body())
        response = await asyncio.wait_for(http.get(f"{ORDER_BASE}2", headers={"X-API-Key": key}), HANG_GUARD)
        assert response.status_code == 200
    finally:
        await admin.close()


async def test_database_outage_answers_503_and_recovers(
    pg_settings: ConnectorSettings, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    """Our connections killed, then the database refusing connections: 503 on both paths, then 200."""
    key = await asyncio.to_thread(setup.create_key, pg_settings, "outage-test")
    fast, slow = make_client(pg_settings), make_client(pg_settings, fast_path=False)
    database = database_name(pg_settings)
    admin = await asyncpg.connect(pg.ADMIN_DSN)

    async def get_all(path: str) -> list[httpx.Response]:
        requests = [
            http.get(f"{path}{i}", headers={"X-API-Key": key}) for http in (fast, slow) for i in (1, 2, 3)
        ]
        return list(await asyncio.wait_for(asyncio.gather(*requests), HANG_GUARD))

    try:
        assert [r.status_code for r in await get_all(ORDER_BASE)] == [200] * 6
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database
        )
        for response in await get_all(ORDER_BASE):
            assert response.status_code == 503
            assert response.json() == orjson.loads(StoreUnavailable().body())
        assert (await fast.get("/healthz")).status_code == 503
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        assert [r.status_code for r in await get_all(ORDER_BASE)] == [200] * 6
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
