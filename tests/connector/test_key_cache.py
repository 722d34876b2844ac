"""The key cache under a slow database: a reload slower than twice the ttl still serves a fresh table."""

from __future__ import annotations

import asyncio

from parley.connector.config import ConnectorSettings
from parley.connector.repository import KeyTable, OrderStore, make_store
from parley.connector.service import KeyCache


class HeldStore(OrderStore):
    """The real store of the test database, whose key reloads wait until the test lets them finish."""

    def __init__(self, inner: OrderStore) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def payload(self, order_id: int) -> bytes | None:
        return await self.inner.payload(order_id)

    async def active_keys(self) -> KeyTable:
        self.entered.set()
        await self.release.wait()
        return await self.inner.active_keys()

    async def ping(self) -> None:
        await self.inner.ping()


async def test_requests_waiting_on_a_slow_reload_get_the_fresh_table(
    backend: ConnectorSettings, api_key: str
) -> None:
    store = HeldStore(make_store(backend))
    ttl = 0.01
    cache = KeyCache(store, ttl)
    try:
        first = asyncio.create_task(cache.get("no-such-key"))
        await store.entered.wait()
        waiting = asyncio.create_task(cache.get("no-such-key"))
        # The reload is held well past twice the ttl, as on a busy database.
        await asyncio.sleep(ttl * 10)
        assert not waiting.done()
        store.release.set()
        assert await first is None
        assert await waiting is None  # before the fix: StoreUnavailable (503), although the reload succeeded
        table = await store.inner.active_keys()
        assert table  # the session's api_key is in it
        for key_id, entry in table.items():
            assert await cache.get(key_id) == entry
    finally:
        await store.close()
