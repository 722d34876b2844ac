"""The key cache under a slow database (a reload slower than twice the ttl still serves a fresh
table), and the memo of verified keys (revocation as soon as without it)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable

import httpx
import pytest

from parley.connector import setup
from parley.connector.config import ConnectorSettings
from parley.connector.db import engine_scope
from parley.connector.keys import revoke_key
from parley.connector.repository import KeyTable, OrderStore, make_store
from parley.connector.service import FailedKeyLimiter, KeyCache
from tests.connector.conftest import ORDER_BASE


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


async def test_a_remembered_key_is_refused_once_revoked(
    backend: ConnectorSettings, make_client: Callable[..., httpx.AsyncClient]
) -> None:
    name = f"memo-{secrets.token_hex(4)}"
    key = await asyncio.to_thread(setup.create_key, backend, name)
    key_id = key.split("_")[1]
    client = make_client(backend)
    # The app behind the client: make_client builds one per call, the last one is ours.
    app = client._transport.app  # type: ignore[attr-defined]
    headers = {"X-API-Key": key}
    for _ in range(3):
        assert (await client.get(f"{ORDER_BASE}1", headers=headers)).status_code == 200
    assert app.gate.keys._verified.get(key_id) == key.encode()  # later requests compare, not hash
    other = key[:-1] + ("A" if key[-1] != "A" else "B")
    wrong = await client.get(f"{ORDER_BASE}1", headers={"X-API-Key": other})
    assert wrong.status_code == 401  # a remembered key id lets no other secret through

    async with engine_scope(backend) as engine:
        await revoke_key(engine, name)
    # The documented bound: refused once the key table is older than key_cache_seconds.
    await asyncio.sleep(backend.key_cache_seconds * 3)
    response = await client.get(f"{ORDER_BASE}1", headers=headers)
    assert response.status_code == 401
    assert response.json()["message"] == "Invalid or revoked API key."
    assert key_id not in app.gate.keys._verified  # the reload forgot what the old table verified


async def test_the_success_path_builds_no_failure_buckets(
    backend: ConnectorSettings, api_key: str, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no failure counted, a good key costs no bucket; once one is counted, every request of
    that key is checked against its buckets again (the limiter is not bypassed)."""
    built: list[tuple[str | None, str, str]] = []
    real = FailedKeyLimiter.buckets

    def counting(key_id: str | None, address: str, organization: str) -> list[tuple[str, ...]]:
        built.append((key_id, address, organization))
        return real(key_id, address, organization)

    monkeypatch.setattr(FailedKeyLimiter, "buckets", staticmethod(counting))
    headers = {"X-API-Key": api_key}
    for _ in range(3):
        assert (await client.get(f"{ORDER_BASE}1", headers=headers)).status_code == 200
    assert built == []  # before: two tuples and a list per request
    wrong = api_key[:-1] + ("A" if api_key[-1] != "A" else "B")
    assert (await client.get(f"{ORDER_BASE}1", headers={"X-API-Key": wrong})).status_code == 401
    assert len(built) == 1
    assert (await client.get(f"{ORDER_BASE}1", headers=headers)).status_code == 200
    assert built[-1] == (api_key.split("_")[1], built[0][1], "-")
