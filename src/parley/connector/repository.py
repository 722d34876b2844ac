"""Data access of the connector.

Read side (the request path): :class:`OrderStore` fetches the pre-serialized payload by primary key
with the plain driver, ``sqlite3`` inline or an ``asyncpg`` pool, never the ORM: a lookup is one
indexed read and bytes out. Write side (import, demo): Core upserts in the caller's transaction.
"""

from __future__ import annotations

import asyncio
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parley.connector.config import ConnectorSettings
from parley.connector.errors import StoreUnavailable
from parley.connector.models import orders

_PAYLOAD_SQL_SQLITE = "SELECT payload FROM connector_orders WHERE id = ?"
_PAYLOAD_SQL_PG = "SELECT payload FROM connector_orders WHERE id = $1"
_KEYS_SQL = "SELECT key_id, key_hash, name FROM connector_api_keys WHERE revoked_at IS NULL"

# key id -> (SHA-256 hex of the key, key name)
KeyTable = dict[str, tuple[str, str]]


class OrderStore(ABC):
    """The request path's view of the database. Driver errors surface as :class:`StoreUnavailable`."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def payload(self, order_id: int) -> bytes | None:
        """The order's JSON as written at import time, or None when there is no such order."""

    @abstractmethod
    async def active_keys(self) -> KeyTable: ...

    @abstractmethod
    async def ping(self) -> None: ...


class SqliteOrderStore(OrderStore):
    """``sqlite3`` on the event loop: a primary-key read takes tens of microseconds, less than a
    thread hop would, and WAL mode means it never waits for a writer."""

    def __init__(self, settings: ConnectorSettings) -> None:
        self._path = settings.sqlite_path
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(
                    f"file:{self._path}?mode=rw", uri=True, timeout=0.25, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise StoreUnavailable() from exc
            self._conn = conn
        return self._conn

    async def open(self) -> None:
        self._connection()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def payload(self, order_id: int) -> bytes | None:
        try:
            row = self._connection().execute(_PAYLOAD_SQL_SQLITE, (order_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        return None if row is None else bytes(row[0])

    async def active_keys(self) -> KeyTable:
        try:
            rows = self._connection().execute(_KEYS_SQL).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        return {key_id: (key_hash, name) for key_id, key_hash, name in rows}

    async def ping(self) -> None:
        try:
            self._connection().execute("SELECT 1 FROM connector_orders LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc


_PG_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


class PostgresOrderStore(OrderStore):
    """A raw asyncpg pool (prepared statements cached per connection), sized to the concurrency."""

    def __init__(self, settings: ConnectorSettings) -> None:
        self._dsn = settings.asyncpg_dsn
        self._size = settings.pg_pool_size
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def _get_pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                try:
                    self._pool = await asyncpg.create_pool(
                        self._dsn, min_size=1, max_size=self._size, timeout=5, command_timeout=5
                    )
                except _PG_ERRORS as exc:
                    raise StoreUnavailable() from exc
            return self._pool

    async def open(self) -> None:
        await self._get_pool()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def payload(self, order_id: int) -> bytes | None:
        pool = await self._get_pool()
        try:
            value: bytes | None = await pool.fetchval(_PAYLOAD_SQL_PG, order_id)
        except _PG_ERRORS as exc:
            raise StoreUnavailable() from exc
        return value

    async def active_keys(self) -> KeyTable:
        pool = await self._get_pool()
        try:
            rows = await pool.fetch(_KEYS_SQL)
        except _PG_ERRORS as exc:
            raise StoreUnavailable() from exc
        return {r["key_id"]: (r["key_hash"], r["name"]) for r in rows}

    async def ping(self) -> None:
        pool = await self._get_pool()
        try:
            await pool.fetchval("SELECT 1 FROM connector_orders LIMIT 1")
        except _PG_ERRORS as exc:
            raise StoreUnavailable() from exc


def make_store(settings: ConnectorSettings) -> OrderStore:
    return SqliteOrderStore(settings) if settings.is_sqlite else PostgresOrderStore(settings)


# --- write side -------------------------------------------------------------------------------


def order_row(order: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Table row of a converted order: its columns plus the payload served as-is on every lookup."""
    return {**order, "payload": orjson.dumps(order), "updated_at": now}


async def upsert_orders(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace orders by id inside the caller's transaction."""
    if not rows:
        return
    insert = pg_insert(orders) if conn.dialect.name == "postgresql" else sqlite_insert(orders)
    columns = [c.name for c in orders.columns if c.name != "id"]
    statement = insert.on_conflict_do_update(
        index_elements=[orders.c.id], set_={name: insert.excluded[name] for name in columns}
    )
    await conn.execute(statement, list(rows))


async def count_orders(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(orders)) or 0)


async def existing_ids(conn: AsyncConnection, ids: Sequence[int]) -> set[int]:
    result = await conn.execute(sa.select(orders.c.id).where(orders.c.id.in_(ids)))
    return {int(row[0]) for row in result}
