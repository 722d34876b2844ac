"""Data access of the connector.

Read side (the request path): :class:`OrderStore` fetches the pre-serialized payload by primary key
with the plain driver, never the ORM: ``sqlite3`` inline (one indexed read), or an ``asyncpg`` pool
on which concurrent lookups share indexed queries; bytes out either way. Write side (import, demo):
Core upserts in the caller's transaction.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import sqlite3
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import asyncpg
import orjson
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parley.connector.config import ConnectorSettings
from parley.connector.errors import StoreUnavailable, envelope_found
from parley.connector.models import orders

_PAYLOAD_SQL_SQLITE = "SELECT payload FROM connector_orders WHERE id = ?"
_BATCH_SQL_PG = "SELECT id, payload FROM connector_orders WHERE id = ANY($1::bigint[])"
_KEYS_SQL = "SELECT key_id, key_hash, name FROM connector_api_keys WHERE revoked_at IS NULL"

# key id -> (SHA-256 hex of the key, key name)
KeyTable = dict[str, tuple[str, str]]


class Absent:
    """The answer for an id a cache does not hold, or that a store cannot answer without awaiting
    (None is a cached "no such order")."""


ABSENT: Final = Absent()


class OrderStore(ABC):
    """The request path's view of the database. Driver errors surface as :class:`StoreUnavailable`."""

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def payload(self, order_id: int) -> bytes | None:
        """The order's JSON as written at import time, or None when there is no such order."""

    async def body(self, order_id: int) -> bytes | None:
        """The whole 200 response body of the order (its payload in the envelope), or None."""
        payload = await self.payload(order_id)
        return None if payload is None else envelope_found(order_id, payload)

    def body_now(self, order_id: int) -> bytes | Absent | None:
        """:meth:`body` without awaiting, when the store can answer so (SQLite reads inline); else
        ``ABSENT``: the caller awaits :meth:`body`. Saves the request path a coroutine per layer."""
        return ABSENT

    @abstractmethod
    async def active_keys(self) -> KeyTable: ...

    @abstractmethod
    async def ping(self) -> None: ...


class PayloadCache:
    """Order response bodies (the payload in its envelope, the exact bytes a 200 sends) by id, or
    None for an id known to have no order; the least recently used entry goes first once the
    estimated memory would exceed ``max_bytes``.

    It knows nothing about freshness: its owner clears it whenever the database may have changed.
    """

    # Memory of an entry beside its payload bytes: the bytes object's header, the int key and the
    # OrderedDict's slot and link (≈ 140 bytes measured with tracemalloc on CPython 3.11), rounded up.
    ENTRY_OVERHEAD = 200

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0  # estimated bytes held
        self._entries: OrderedDict[int, bytes | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, order_id: int) -> bytes | Absent | None:
        entries = self._entries
        if order_id in entries:
            entries.move_to_end(order_id)
            return entries[order_id]
        return ABSENT

    def put(self, order_id: int, payload: bytes | None) -> None:
        cost = self.ENTRY_OVERHEAD + (0 if payload is None else len(payload))
        if cost > self.max_bytes:
            return
        entries = self._entries
        old = entries.pop(order_id, ABSENT)
        if not isinstance(old, Absent):
            self.size -= self.ENTRY_OVERHEAD + (0 if old is None else len(old))
        while entries and self.size + cost > self.max_bytes:
            _, dropped = entries.popitem(last=False)
            self.size -= self.ENTRY_OVERHEAD + (0 if dropped is None else len(dropped))
        entries[order_id] = payload
        self.size += cost

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0


# The wal-index header at the start of the -shm file (https://sqlite.org/walformat.html): 48 bytes
# that every commit rewrites (change counter, last frame, checksums), and the bytes SQLite itself
# compares to decide whether a reader's cached pages are still current.
_WAL_INDEX_HEADER = 48


class SqliteOrderStore(OrderStore):
    """``sqlite3`` on the event loop: a primary-key read takes tens of microseconds, less than a
    thread hop would, and WAL mode means it never waits for a writer.

    Response bodies are cached in memory (:class:`PayloadCache`, ``order_cache_mb``) and the whole
    cache is dropped whenever the database may have changed, checked on **every** lookup, so a lookup
    never answers older data than a read of the file would. The check compares the 48-byte wal-index
    header, read from a shared read-only mapping of the ``-shm`` file (a memory copy, ≈ 0.1 µs; a
    ``pread`` was ≈ 0.5 µs): SQLite rewrites it on every commit, from any connection or process, and
    it is what SQLite itself compares before trusting its own page cache. The mapping is as safe as
    SQLite's own mapping of the same file in this process: while this store's connection is open,
    it holds a shared lock that keeps any connection from truncating the file.
    Where that file cannot be read (not in WAL mode), the check is ``PRAGMA data_version``, which
    changes when another connection commits (≈ 9 µs; this store's connection never writes).
    """

    use_wal_index = True  # False forces the PRAGMA data_version check (tests of that path)

    def __init__(self, settings: ConnectorSettings) -> None:
        self._path = settings.sqlite_path
        self._conn: sqlite3.Connection | None = None
        max_bytes = int(settings.order_cache_mb * 1024 * 1024)
        self.cache = PayloadCache(max_bytes) if max_bytes > 0 else None
        self._shm: mmap.mmap | None = None  # read-only shared mapping of the -shm file's header
        self._seen: bytes | int | None = None  # the change token the cache's entries belong to

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(
                    f"file:{self._path}?mode=rw", uri=True, timeout=0.25, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise StoreUnavailable() from exc
            self._conn = conn
            # data_version and the wal-index belong to a connection: a new one starts a new cache.
            self._seen = None
            if self.cache is not None:
                self.cache.clear()
                self._open_wal_index(conn)
        return self._conn

    def _open_wal_index(self, conn: sqlite3.Connection) -> None:
        """Open the -shm file this connection uses, if the database is in WAL mode; else leave the
        PRAGMA check in place. Once the connection has read, SQLite keeps its -shm open and never
        truncates or deletes it until the connection closes (it holds a shared lock on it)."""
        if not self.use_wal_index:
            return
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                return
            conn.execute("PRAGMA data_version").fetchone()  # a read: maps the wal-index
        except sqlite3.Error:
            return  # the lookup itself reports an unreachable database
        try:
            fd = os.open(os.path.realpath(self._path) + "-shm", os.O_RDONLY)
        except OSError:
            return
        try:
            both = os.pread(fd, 2 * _WAL_INDEX_HEADER, 0)
        except OSError:
            both = b""
        try:
            # Initialized (isInit at offset 12) and its two copies equal: a live wal-index.
            if len(both) == 2 * _WAL_INDEX_HEADER and both[12] == 1 and both[:48] == both[48:]:
                # Mapped shared, as SQLite maps it: a commit by any process shows in this memory at
                # once, and reading it is a memory copy instead of a pread system call per lookup.
                self._shm = mmap.mmap(fd, _WAL_INDEX_HEADER, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return
        finally:
            os.close(fd)  # the mapping outlives the descriptor

    def _close_wal_index(self) -> None:
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    @staticmethod
    def _data_version(conn: sqlite3.Connection) -> int:
        """The change check without a mapped wal-index (body_now reads the mapped header inline)."""
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    async def open(self) -> None:
        self._connection()

    async def close(self) -> None:
        self._close_wal_index()
        if self.cache is not None:
            self.cache.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def payload(self, order_id: int) -> bytes | None:
        # A read of the file, past the cache (which holds whole bodies, see body_now).
        try:
            row = self._connection().execute(_PAYLOAD_SQL_SQLITE, (order_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        return None if row is None else bytes(row[0])

    async def body(self, order_id: int) -> bytes | None:
        return self.body_now(order_id)

    def body_now(self, order_id: int) -> bytes | None:
        """The order's 200 body, built once per cached entry: a hit sends the cached bytes as they
        are, with no envelope to splice per request."""
        cache = self.cache
        try:
            conn = self._conn or self._connection()
            if cache is not None:
                # The mapped header inline (the common case), else the check that needs a query.
                shm = self._shm
                token = shm[:_WAL_INDEX_HEADER] if shm is not None else self._data_version(conn)
                if token != self._seen:
                    cache.clear()
                    self._seen = token
                cached = cache.get(order_id)
                if not isinstance(cached, Absent):
                    return cached
            # Read after the check: the row is at least as new as the token it is filed under.
            row = conn.execute(_PAYLOAD_SQL_SQLITE, (order_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailable() from exc
        body = None if row is None else envelope_found(order_id, bytes(row[0]))
        if cache is not None:
            cache.put(order_id, body)
        return body

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


# InternalClientError: what asyncpg raises on a connection whose backend was killed mid-use.
_PG_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)
_Waiter = tuple[int, "asyncio.Future[bytes | None]"]


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset that sends nothing: the store only runs SELECTs, so a connection has no session
    state to clear, and asyncpg's default reset would cost a second round trip per checkout."""


def _lookup_error(exc: Exception) -> Exception:
    """What a waiter of a failed query raises: 503 for a database failure, else the error itself."""
    if isinstance(exc, (StoreUnavailable, *_PG_ERRORS)):
        error = StoreUnavailable()
        error.__cause__ = exc
        return error
    return exc


class PostgresOrderStore(OrderStore):
    """A raw asyncpg pool whose order lookups are coalesced.

    Under load, many lookups wait at once; one query and one backend wake-up each is what limited
    this path. Here a lookup that finds a free connection is sent at once (a lone request waits for
    nothing), while lookups arriving as every connection is busy queue up and leave together, as one
    ``WHERE id = ANY($1)`` query, when a connection frees up. A lookup only ever joins a query that
    has not been sent yet, so every answer is read from the database after its request arrived:
    coalescing never serves older data than one query per request would.
    """

    def __init__(self, settings: ConnectorSettings) -> None:
        self._dsn = settings.asyncpg_dsn
        self._size = settings.pg_pool_size
        # One connection stays free for key reloads and health checks, so that they never queue
        # behind lookups under load (asyncpg's pool does not hand a released connection to the
        # longest waiter if its releaser asks again first).
        self._max_senders = max(1, self._size - 1)
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._waiting: list[_Waiter] = []  # lookups for the next query, in arrival order
        self._senders: set[asyncio.Task[None]] = set()  # kept to cancel them on close
        self._sending = 0  # senders running: counted synchronously, a done callback would lag
        self._sender_starting = False  # a sender exists that has not yet taken the waiting lookups
        self.queries = 0  # lookup queries sent: batching is visible to tests and diagnostics

    async def _get_pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                try:
                    self._pool = await asyncpg.create_pool(
                        self._dsn,
                        min_size=1,
                        max_size=self._size,
                        timeout=5,
                        command_timeout=5,
                        reset=_keep_session,
                    )
                except _PG_ERRORS as exc:
                    raise StoreUnavailable() from exc
            return self._pool

    async def open(self) -> None:
        await self._get_pool()

    async def close(self) -> None:
        for task in list(self._senders):
            task.cancel()
        await asyncio.gather(*self._senders, return_exceptions=True)
        for _, future in self._waiting:
            future.cancel()
        self._waiting = []
        self._sending, self._sender_starting = 0, False  # a sender cancelled before it ran
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def payload(self, order_id: int) -> bytes | None:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((order_id, future))
        # A lookup goes at once while a connection is free; else it waits for the next free one.
        if not self._sender_starting and self._sending < self._max_senders:
            self._sender_starting = True
            self._sending += 1
            sender = asyncio.create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await future

    async def _send(self) -> None:
        """Send the waiting lookups as one query, then again while more are waiting."""
        self._sender_starting = False
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._answer(batch)
        finally:
            # In the same step as the last check of the queue: a lookup queued after it starts a sender.
            self._sending -= 1

    async def _answer(self, batch: list[_Waiter]) -> None:
        ids = list({order_id for order_id, _ in batch})
        try:
            pool = await self._get_pool()
            # A checkout per query: a sender holds no connection between queries.
            async with pool.acquire() as conn:
                self.queries += 1
                try:
                    rows = await conn.fetch(_BATCH_SQL_PG, ids)
                except asyncpg.PostgresError:
                    raise  # reported by the server: the connection itself is fine
                except BaseException:
                    # Broken, timed out or interrupted: the pool opens a fresh connection instead of
                    # handing this one out again (there is no reset query that would notice).
                    conn.terminate()
                    raise
        except asyncio.CancelledError:
            for _, future in batch:  # the store is closing
                future.cancel()
            raise
        except Exception as exc:  # every waiter must be answered, whatever happened
            for _, future in batch:
                if not future.done():  # a waiter whose request was cancelled is skipped
                    future.set_exception(_lookup_error(exc))
            return
        found: dict[int, bytes] = {row[0]: row[1] for row in rows}
        for order_id, future in batch:
            if not future.done():
                future.set_result(found.get(order_id))

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
