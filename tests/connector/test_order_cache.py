"""The SQLite store's payload cache: never stale, bounded, answers unchanged.

Real parts only: a SQLite file, the connector app called over ASGI, writes made by other processes
(the ``parley connector import`` command, a plain ``sqlite3`` session) and by this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from parley.connector import setup
from parley.connector.app import ConnectorApp, create_connector_app
from parley.connector.config import ConnectorSettings
from parley.connector.demo import generate_orders
from parley.connector.repository import ABSENT, PayloadCache, SqliteOrderStore
from tests.connector.conftest import ORDER_BASE, fresh_database, make_settings

ROOT = Path(__file__).resolve().parents[2]
COUNT = 40
Connect = Callable[[ConnectorSettings], tuple[ConnectorApp, httpx.AsyncClient]]


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> ConnectorSettings:
    """A fresh SQLite database of COUNT demo orders (a test may change it freely)."""
    url, _ = fresh_database("sqlite", tmp_path)
    settings = make_settings(url, tmp_path, rate_limit=0)
    asyncio.run(setup.write_demo_orders(settings, COUNT, seed=3))
    return settings


@pytest.fixture
def key(sqlite_settings: ConnectorSettings) -> str:
    return setup.create_key(sqlite_settings, "cache-tests")


@pytest.fixture(params=["wal-index", "data_version"])
def check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both change checks: the wal-index header (default) and PRAGMA data_version (the fallback)."""
    if request.param == "data_version":
        monkeypatch.setattr(SqliteOrderStore, "use_wal_index", False)
    return str(request.param)


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    opened: list[tuple[ConnectorApp, httpx.AsyncClient]] = []

    def build(settings: ConnectorSettings) -> tuple[ConnectorApp, httpx.AsyncClient]:
        app = create_connector_app(settings)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://connector")
        opened.append((app, http))
        return app, http

    yield build
    for app, http in opened:
        await http.aclose()
        await app.aclose()


def store_of(app: ConnectorApp) -> SqliteOrderStore:
    assert isinstance(app.store, SqliteOrderStore)
    return app.store


async def get(http: httpx.AsyncClient, key: str, order_id: int) -> httpx.Response:
    return await http.get(f"{ORDER_BASE}{order_id}", headers={"X-API-Key": key})


def run_elsewhere(settings: ConnectorSettings, sql: str, *params: object) -> None:
    """Run one write in another process, through its own sqlite3 connection."""
    code = (
        "import sqlite3, sys, json\n"
        "conn = sqlite3.connect(sys.argv[1])\n"
        "with conn:\n"
        "    conn.execute(sys.argv[2], json.loads(sys.argv[3]))\n"
        "conn.close()\n"
    )
    args = [str(settings.sqlite_path), sql, json.dumps(list(params))]
    subprocess.run([sys.executable, "-c", code, *args], check=True, timeout=60)


async def test_an_import_by_another_process_is_served_at_once(
    sqlite_settings: ConnectorSettings, key: str, check: str, connect: Connect, tmp_path: Path
) -> None:
    app, http = connect(sqlite_settings)
    before = (await get(http, key, 5)).json()["order"]
    assert (await get(http, key, 5)).json()["order"] == before
    store = store_of(app)
    assert store.cache is not None and store.cache.get(5) is not ABSENT  # cached by the first GET
    assert (store._shm is not None) == (check == "wal-index")

    changed = {**before, "short_name": "Neumann-Cache"}
    path = tmp_path / "orders.jsonl"
    path.write_text(json.dumps(changed) + "\n", encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "PARLEY_DATA_DIR": str(sqlite_settings.data_dir),
        "PARLEY_CONNECTOR_DATABASE_URL": str(sqlite_settings.database_url),
    }
    result = subprocess.run(
        [sys.executable, "-m", "parley", "connector", "import", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "1 updated" in result.stdout

    after = (await get(http, key, 5)).json()["order"]
    assert after["short_name"] == "Neumann-Cache"
    assert after == changed


async def test_a_delete_and_an_insert_by_another_process_are_served_at_once(
    sqlite_settings: ConnectorSettings, key: str, check: str, connect: Connect
) -> None:
    _, http = connect(sqlite_settings)
    assert (await get(http, key, 7)).status_code == 200
    missing = COUNT + 1
    assert (await get(http, key, missing)).status_code == 404  # a 404 is cached too

    run_elsewhere(sqlite_settings, "DELETE FROM connector_orders WHERE id = ?", 7)
    gone = await get(http, key, 7)
    assert gone.status_code == 404
    assert gone.json()["message"] == "Order 7 was not found."

    conn = sqlite3.connect(sqlite_settings.sqlite_path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(connector_orders)")]
    conn.close()
    others = [c for c in columns if c not in ("id", "payload")]
    payload = json.dumps({"id": missing, "note": "inserted elsewhere"})
    run_elsewhere(
        sqlite_settings,
        # Column names from the table itself, no input: a copy of order 1 under a new id and payload.
        f"INSERT INTO connector_orders (id, payload, {', '.join(others)}) "  # noqa: S608
        f"SELECT ?, CAST(? AS BLOB), {', '.join(others)} FROM connector_orders WHERE id = 1",
        missing,
        payload,
    )
    found = await get(http, key, missing)
    assert found.status_code == 200
    assert found.json()["order"] == {"id": missing, "note": "inserted elsewhere"}


async def test_a_write_through_this_process_is_served_at_once(
    sqlite_settings: ConnectorSettings, key: str, check: str, connect: Connect
) -> None:
    """The importer's and the demo's own path (SQLAlchemy, aiosqlite), in the serving process."""
    _, http = connect(sqlite_settings)
    old = (await get(http, key, 3)).json()["order"]
    assert (await get(http, key, COUNT + 5)).status_code == 404
    # New demo orders with another seed over ids 1..COUNT + 5: order 3 changes, COUNT + 5 appears.
    await setup.write_demo_orders(sqlite_settings, COUNT + 5, seed=99)
    expected = {o["id"]: o for o in generate_orders(COUNT + 5, seed=99)}
    new = (await get(http, key, 3)).json()["order"]
    assert new != old
    assert new == json.loads(json.dumps(expected[3]))
    assert (await get(http, key, COUNT + 5)).status_code == 200


async def test_the_cache_keeps_within_its_bound(
    sqlite_settings: ConnectorSettings, key: str, connect: Connect
) -> None:
    settings = sqlite_settings.model_copy(update={"order_cache_mb": 0.01})  # 10,485 bytes: a few orders
    app, http = connect(settings)
    cache = store_of(app).cache
    assert cache is not None and cache.max_bytes == 10_485
    bodies = {}
    for order_id in range(1, COUNT + 1):
        response = await get(http, key, order_id)
        assert response.status_code == 200 and response.json()["order"]["id"] == order_id
        bodies[order_id] = response.content
        assert cache.size <= cache.max_bytes
    assert 0 < len(cache) < 10
    for order_id in (1, COUNT):  # evicted and kept entries alike answer the same bytes
        assert (await get(http, key, order_id)).content == bodies[order_id]


async def test_cache_off_reads_the_file_every_time(
    sqlite_settings: ConnectorSettings, key: str, connect: Connect
) -> None:
    app, http = connect(sqlite_settings.model_copy(update={"order_cache_mb": 0}))
    assert store_of(app).cache is None
    assert (await get(http, key, 2)).status_code == 200
    run_elsewhere(sqlite_settings, "DELETE FROM connector_orders WHERE id = ?", 2)
    assert (await get(http, key, 2)).status_code == 404


def test_least_recently_used_goes_first() -> None:
    cache = PayloadCache(3 * (PayloadCache.ENTRY_OVERHEAD + 10))
    for order_id in (1, 2, 3):
        cache.put(order_id, b"x" * 10)
    assert cache.get(1) == b"x" * 10  # 1 is now the most recently used
    cache.put(4, None)  # a missing order costs its overhead only
    assert cache.get(2) is ABSENT
    assert [cache.get(i) for i in (1, 3, 4)] == [b"x" * 10, b"x" * 10, None]
    cache.put(3, b"y" * 10)  # replacing an entry does not count it twice
    assert cache.size == 3 * PayloadCache.ENTRY_OVERHEAD + 20
    cache.put(5, b"z" * 10_000)  # larger than the whole cache: not kept, nothing evicted
    assert cache.get(5) is ABSENT and len(cache) == 3
    cache.clear()
    assert len(cache) == 0 and cache.size == 0


async def test_cached_orders_and_bad_input_answer_as_without_the_cache(
    sqlite_settings: ConnectorSettings, key: str, connect: Connect
) -> None:
    _, cached = connect(sqlite_settings)
    _, uncached = connect(sqlite_settings.model_copy(update={"order_cache_mb": 0}))
    paths = [f"{ORDER_BASE}{i}" for i in (1, 2, 1, COUNT + 1, COUNT + 1)]
    paths += [f"{ORDER_BASE}{bad}" for bad in ("0", "abc", "-1", "9223372036854775808")]
    for path in paths:
        for headers in ({"X-API-Key": key}, {"X-API-Key": key[:-1] + "x"}, {}):
            one = await cached.get(path, headers=headers)
            other = await uncached.get(path, headers=headers)
            assert (one.status_code, one.content) == (other.status_code, other.content), path


async def test_a_hit_sends_the_cached_body_and_a_change_replaces_it(
    sqlite_settings: ConnectorSettings, key: str, check: str, connect: Connect
) -> None:
    """The cache holds whole 200 bodies (no envelope built per hit), dropped on any commit."""
    app, http = connect(sqlite_settings)
    first = await get(http, key, 6)
    cache = store_of(app).cache
    assert cache is not None and cache.get(6) == first.content  # the exact bytes sent
    assert (await get(http, key, 6)).content == first.content

    run_elsewhere(
        sqlite_settings, "UPDATE connector_orders SET payload = CAST(? AS BLOB) WHERE id = ?", '{"id":6}', 6
    )
    changed = await get(http, key, 6)
    assert changed.content == b'{"success":true,"order":{"id":6},"message":"Order 6 found."}'
    assert cache.get(6) == changed.content


async def test_the_change_check_reads_the_wal_index_without_a_system_call(
    sqlite_settings: ConnectorSettings, key: str, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, http = connect(sqlite_settings)
    assert (await get(http, key, 1)).status_code == 200  # opens the connection and the wal-index
    assert store_of(app)._shm is not None
    preads = 0
    real_pread = os.pread

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        nonlocal preads
        preads += 1
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    for order_id in (1, 2, 1):
        assert (await get(http, key, order_id)).status_code == 200
    assert preads == 0  # before: one pread of the -shm file per lookup
    run_elsewhere(sqlite_settings, "DELETE FROM connector_orders WHERE id = ?", 1)
    assert (await get(http, key, 1)).status_code == 404  # the mapping sees another process's commit
