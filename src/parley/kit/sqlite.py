"""SQLite through aiosqlite with one thread hop per statement.

aiosqlite runs each connection's calls on a worker thread of its own, one hop (queue, thread wake-up,
result back to the event loop) per call. SQLAlchemy's adapter makes four hops for every statement
(cursor, execute, fetchall, close) and one for every ``BEGIN``, ``COMMIT`` and reset-on-return
``ROLLBACK``, nine for a GET that reads one row. On a loaded core each hop costs a thread switch and a
GIL hand-over, and together they were most of a simple request's time (docs/benchmarks.md).

:class:`OneHopConnection` keeps aiosqlite's thread and queue (so a long query never blocks the event
loop) and changes what crosses them:

- a statement runs with its ``fetchall`` and cursor close in one hop; the rows come back buffered
  (the platform never streams results from SQLite);
- the ``BEGIN`` SQLAlchemy emits is held and sent in the same hop as the transaction's first statement
  (a transaction that runs no statement never reaches SQLite);
- ``COMMIT`` and ``ROLLBACK`` are skipped when SQLite reports no open transaction (a read outside a
  transaction, or the pool's reset of a connection that already committed), and end a transaction
  that only read right here (ending a WAL read snapshot does no I/O and never waits);
- a ``SELECT`` runs at once on the event loop's thread, with no hop at all, when it can neither wait
  nor run long: in WAL mode a reader never waits for a writer, and for the rare cases where it could
  (another connection recovering the WAL) the busy time-out is 0 during the attempt; a progress handler
  stops any read that passes :data:`INLINE_BUDGET_S`. A stopped or busy read runs again on the thread,
  in the same transaction. A primary-key read takes a few microseconds this way, against a hop's
  thread switch; a long list or export moves to the thread after at most the budget;
- once the transaction holds SQLite's write lock, a statement that writes one row — an ``INSERT`` of one
  row, an ``UPDATE`` picked by the primary key (what the ORM's flush sends) — runs on the event loop too:
  with the lock held it cannot wait for anyone, and one row costs microseconds. Every other write (many
  rows, a ``DELETE`` that may cascade, anything before the lock is taken) and every ``COMMIT`` that
  follows a write (which may checkpoint the WAL) stay on the thread.

A deferred transaction that has only read when it first writes cannot always take the write lock: if
another connection committed after its first read, SQLite refuses with ``SQLITE_BUSY_SNAPSHOT``, at
once and whatever the busy time-out (its snapshot is stale). The adapter then ends the read snapshot,
takes the lock with ``BEGIN IMMEDIATE`` (waiting as a writer does), opens the same savepoints again and
runs the write: the earlier reads are not repeated. That is what PostgreSQL's default isolation (read
committed) does with the same statements, and the platform's code is written for it: each statement
sees what was committed before it. A transaction that has written anything is never restarted.

Busy and locked errors are told apart by SQLite's primary result code: Python reports the extended
one (``SQLITE_BUSY_RECOVERY``, ``SQLITE_BUSY_SNAPSHOT``...), and a read on the event loop that meets
any kind of busy goes on on the thread instead of failing.

Nothing else changes: the same ``sqlite3`` connection, errors and transaction boundaries. A held
``BEGIN IMMEDIATE`` takes the write lock with the first statement instead of just before it.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy import event
from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite

from parley.kit.prepared import PreparedReads

INLINE_BUDGET_S = 0.002  # a SELECT still running after this long goes on on the connection's thread
BUDGET_CHECK_STEPS = 1000  # SQLite virtual-machine steps between two looks at the budget
_GIVE_WAY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT})
_BUSY_OR_LOCKED = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

Description = tuple[tuple[Any, ...], ...] | None
Outcome = tuple[Description, int, int | None, list[Any]]


def _run(connection: sqlite3.Connection, begin: str | None, sql: str, parameters: Any, many: bool) -> Outcome:
    """On the connection's thread: the held BEGIN, the statement, its rows, and the cursor closed."""
    if begin is not None:
        connection.execute(begin)
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description is not None else []
        return description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


def _primary_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code (``SQLITE_BUSY`` for ``SQLITE_BUSY_RECOVERY`` and the like)."""
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _run_upgrading(
    connection: sqlite3.Connection, savepoints: tuple[str, ...], sql: str, parameters: Any, many: bool
) -> Outcome:
    """On the thread, in a deferred transaction that has only read: the statement, and when it is a
    write SQLite refuses for a stale snapshot, the same write in a new ``BEGIN IMMEDIATE`` transaction
    with the open savepoints opened again (see the module docstring)."""
    try:
        return _run(connection, None, sql, parameters, many)
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY_SNAPSHOT:
            raise
    connection.rollback()  # only reads to undo: the read snapshot ends
    connection.execute("BEGIN IMMEDIATE")  # waits for the write lock up to the busy time-out
    for savepoint in savepoints:
        connection.execute(savepoint)
    return _run(connection, None, sql, parameters, many)


def _is_begin(sql: str) -> bool:
    return sql[:5].upper() == "BEGIN"


# One row, found by the primary key or inserted: what the ORM's flush sends for a loaded object.
_ONE_ROW_WRITE = re.compile(
    r"INSERT INTO (\w+) \([^()]*\) VALUES \([?, ]*\)"
    r"|UPDATE (\w+) SET [^()]*? WHERE \2\.id = \?(?: AND \2\.\w+ = \?)*"
)


_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "REPLAC"})


def _one_row_write(sql: str) -> bool:
    return _ONE_ROW_WRITE.fullmatch(sql) is not None


def _may_wait(begin: str | None) -> bool:
    """``BEGIN IMMEDIATE``/``EXCLUSIVE`` waits for the write lock: never on the event loop."""
    return begin is not None and begin.split()[-1].upper() in {"IMMEDIATE", "EXCLUSIVE"}


class OneHopCursor:
    """The cursor SQLAlchemy's aiosqlite adapter drives: one hop per ``execute``, rows buffered."""

    def __init__(self, connection: OneHopConnection) -> None:
        self._connection = connection
        self.description: Description = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1
        self._rows: list[Any] = []
        self._position = 0

    async def __aenter__(self) -> OneHopCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def execute(self, sql: str, parameters: Any = None) -> OneHopCursor:
        return await self._statement(sql, parameters, many=False)

    async def executemany(self, sql: str, parameters: Any) -> OneHopCursor:
        return await self._statement(sql, parameters, many=True)

    async def _statement(self, sql: str, parameters: Any, *, many: bool) -> OneHopCursor:
        connection = self._connection
        if not many and not parameters and _is_begin(sql):
            connection.held_begin = sql  # sent with the transaction's first statement
            self.description, self.rowcount, self.lastrowid, self._rows = None, -1, None, []
            self._position = 0
            return self
        begin, connection.held_begin = connection.held_begin, None
        if begin is not None:  # this statement opens the transaction
            connection.only_read = not _may_wait(begin)
            connection.savepoints = []
        outcome: Outcome | None = None
        if not many and sql[:6].upper() == "SELECT" and not _may_wait(begin):
            outcome, begin = connection.read_here(begin, sql, parameters)
        elif not many and begin is None and connection.write_locked and _one_row_write(sql):
            connection.wrote = True
            outcome = connection.write_here(sql, parameters)
        if outcome is None:
            connection.wrote = True  # may have written: its transaction ends on the thread
            try:
                if begin is None and connection.only_read and connection.sqlite.in_transaction:
                    savepoints = tuple(connection.savepoints)
                    outcome = await connection.on_thread(
                        _run_upgrading, connection.sqlite, savepoints, sql, parameters, many
                    )
                else:
                    outcome = await connection.on_thread(
                        _run, connection.sqlite, begin, sql, parameters, many
                    )
            except BaseException:
                connection.write_locked = False  # SQLite may have ended the transaction: ask again later
                raise
            if sql[:19].upper() == "PRAGMA BUSY_TIMEOUT":
                connection.forget_busy_timeout()  # set (or read) anew: ask SQLite next time
            # After BEGIN IMMEDIATE or a write, the transaction holds the write lock until it ends
            # (a SAVEPOINT or a PRAGMA takes no lock).
            connection.write_locked = connection.sqlite.in_transaction and (
                connection.write_locked or _may_wait(begin) or sql[:6].upper() in _WRITES
            )
        if connection.only_read:
            connection.note_statement(sql)
        self.description, self.rowcount, self.lastrowid, self._rows = outcome
        self._position = 0
        return self

    async def fetchone(self) -> Any:
        if self._position >= len(self._rows):
            return None
        self._position += 1
        return self._rows[self._position - 1]

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        start = self._position
        self._position = min(len(self._rows), start + (size or self.arraysize))
        return self._rows[start : self._position]

    async def fetchall(self) -> list[Any]:
        rows = self._rows[self._position :]
        self._position = len(self._rows)
        return rows

    async def close(self) -> None:
        self._rows = []
        self._position = 0

    async def nextset(self) -> None:
        return None

    async def setinputsizes(self, *_sizes: Any) -> None:
        return None

    def setoutputsize(self, *_args: Any) -> None:
        return None


class _CursorOpener:
    """What ``connection.cursor()`` returns: awaitable and an async context, like aiosqlite's."""

    def __init__(self, cursor: OneHopCursor) -> None:
        self._cursor = cursor

    def __await__(self) -> Any:
        async def ready() -> OneHopCursor:
            return self._cursor

        return ready().__await__()

    async def __aenter__(self) -> OneHopCursor:
        return self._cursor

    async def __aexit__(self, *_exc: object) -> None:
        await self._cursor.close()


class OneHopConnection(aiosqlite.Connection):
    """An aiosqlite connection whose cursors make one hop per statement (see the module docstring)."""

    def __init__(self, connector: Callable[[], sqlite3.Connection], iter_chunk_size: int = 64) -> None:
        super().__init__(connector, iter_chunk_size)
        self.held_begin: str | None = None
        self._busy_ms: int | None = None  # the connection's configured busy time-out
        self._busy_now: int | None = None  # the one set now (0 while working on the event loop)
        self.wrote = False  # a statement of the open transaction ran on the thread (it may have written)
        self.write_locked = False  # the open transaction holds SQLite's write lock
        # The open transaction is a deferred one that has only read so far (and the savepoints it has
        # open): a write refused for a stale snapshot may then restart it (see _run_upgrading).
        self.only_read = False
        self.savepoints: list[str] = []

    @property
    def sqlite(self) -> sqlite3.Connection:
        return self._conn

    def hold_begin(self, begin: str) -> None:
        """The transaction's ``BEGIN``, sent with its first statement (what a cursor does with one)."""
        self.held_begin = begin

    def read_here(self, begin: str | None, sql: str, parameters: Any) -> tuple[Outcome | None, str | None]:
        """Try a SELECT on the calling thread: (its outcome, None), or (None, the BEGIN still to send)
        when it would have waited or run past the budget."""
        connection = self.sqlite
        self._busy_wait(False)  # before the budget starts: a PRAGMA must never be interrupted by it
        deadline = time.perf_counter() + INLINE_BUDGET_S
        connection.set_progress_handler(lambda: time.perf_counter() > deadline, BUDGET_CHECK_STEPS)
        try:
            if begin is not None:
                connection.execute(begin)
                begin = None
            return _run(connection, None, sql, parameters, False), None
        except sqlite3.OperationalError as error:
            if _primary_code(error) in _GIVE_WAY:
                return None, begin
            raise
        finally:
            connection.set_progress_handler(None, 0)

    def write_here(self, sql: str, parameters: Any) -> Outcome | None:
        """A one-row write under the transaction's own write lock, on the calling thread; None when
        SQLite is not in the transaction any more (the thread then runs it and reports the error)."""
        connection = self.sqlite
        if not connection.in_transaction:
            return None
        self._busy_wait(False)  # should the lock not be held after all: no wait here
        try:
            return _run(connection, None, sql, parameters, False)
        except sqlite3.OperationalError as error:
            if _primary_code(error) in _BUSY_OR_LOCKED:
                self.write_locked = False
                return None  # nothing was written: the thread runs it, waiting as long as it may
            raise

    def note_statement(self, sql: str) -> None:
        """Keep ``only_read`` and the open savepoints up to date after a statement of the transaction."""
        head = sql[:9].upper()
        if head.startswith("SELECT"):
            return
        if head == "SAVEPOINT":
            self.savepoints.append(sql)
            return
        # RELEASE ends the named savepoint and every later one; ROLLBACK TO ends the later ones only.
        release, rollback_to = head.startswith("RELEASE"), head.startswith("ROLLBACK")
        if not (release or rollback_to):
            self.only_read = False
            return
        name = sql.split()[-1]
        opened = [savepoint.split()[-1] for savepoint in self.savepoints]
        if name in opened:
            del self.savepoints[opened.index(name) + (0 if release else 1) :]

    def _busy_wait(self, allowed: bool) -> None:
        """SQLite's busy time-out: 0 for work on the event loop, the configured one on the thread.
        Changed only when the kind of work changes (a PRAGMA costs as much as a primary-key read)."""
        if self._busy_ms is None:
            self._busy_ms = int(self.sqlite.execute("PRAGMA busy_timeout").fetchone()[0])
            self._busy_now = self._busy_ms
        wanted = self._busy_ms if allowed else 0
        if self._busy_now != wanted:
            self.sqlite.execute(f"PRAGMA busy_timeout={wanted}")
            self._busy_now = wanted

    def forget_busy_timeout(self) -> None:
        self._busy_ms = self._busy_now = None

    async def on_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        if self._connection is not None:
            self._busy_wait(True)  # nothing runs on the thread meanwhile: each statement is awaited
        return await self._execute(function, *args)  # type: ignore[no-untyped-call]

    def cursor(self) -> _CursorOpener:  # type: ignore[override]
        return _CursorOpener(OneHopCursor(self))

    def _open_transaction(self) -> bool:
        if self.held_begin is not None:  # BEGIN was never sent: there is nothing to end
            self.held_begin = None
            return False
        return self._connection is not None and self.sqlite.in_transaction

    async def commit(self) -> None:
        await self._end("commit")

    async def rollback(self) -> None:
        await self._end("rollback")

    async def _end(self, how: str) -> None:
        self.write_locked = self.only_read = False
        if not self._open_transaction():
            self.wrote = False
            return
        end: Callable[[], None] = getattr(self.sqlite, how)
        if self.wrote:
            self.wrote = False
            await self.on_thread(end)
        else:
            end()  # the transaction only read: ending it releases a snapshot, no I/O, no wait


def connect_one_hop(database: str, **kwargs: Any) -> OneHopConnection:
    """SQLAlchemy's ``async_creator_fn`` for the aiosqlite dialect: ``connect_args={"async_creator_fn": …}``."""

    def connector() -> sqlite3.Connection:
        opened: sqlite3.Connection = sqlite3.connect(database, **kwargs)
        return opened

    connection = OneHopConnection(connector)
    connection._thread.daemon = True  # like aiosqlite.connect through SQLAlchemy: never blocks exit
    return connection


def _hold(begin: str, conn: Any) -> None:
    """A ``begin`` listener: the transaction opens with ``begin`` (held until its first statement)."""
    driver = conn.connection.driver_connection
    if isinstance(driver, OneHopConnection):
        driver.hold_begin(begin)
    else:
        conn.exec_driver_sql(begin)


class OneHopDialect(SQLiteDialect_aiosqlite):
    """SQLAlchemy's aiosqlite dialect, giving the one-hop adapter its ``BEGIN`` directly.

    pysqlite's own transaction handling is off (it breaks ``SAVEPOINT``), so SQLAlchemy must have
    ``BEGIN`` sent. A ``begin`` event listener did that on every connection, and any such listener
    makes SQLAlchemy look for listeners of every other connection event at every statement, begin,
    commit and rollback. Here the dialect hands ``BEGIN DEFERRED`` to the adapter when SQLAlchemy
    begins (where the dialect's ``do_begin`` is called); only an engine or a connection given
    ``execution_options(sqlite_begin="IMMEDIATE")`` (the writers, which take the write lock up front)
    has a listener, and it alone pays for it.
    """

    supports_statement_cache = True

    def do_begin(self, dbapi_connection: Any) -> None:
        driver = dbapi_connection.driver_connection
        if not isinstance(driver, OneHopConnection):
            dbapi_connection.cursor().execute("BEGIN DEFERRED")
        elif driver.held_begin is None:  # else an execution option's listener chose it
            driver.hold_begin("BEGIN DEFERRED")

    def set_engine_execution_options(self, engine: Any, opts: Any) -> None:
        super().set_engine_execution_options(engine, opts)
        if "sqlite_begin" in opts:
            event.listen(engine, "begin", functools.partial(_hold, f"BEGIN {opts['sqlite_begin']}"))

    def set_connection_execution_options(self, connection: Any, opts: Any) -> None:
        super().set_connection_execution_options(connection, opts)
        if "sqlite_begin" in opts:
            event.listen(connection, "begin", functools.partial(_hold, f"BEGIN {opts['sqlite_begin']}"))


# ``sqlite+aiosqlite://`` URLs are served by this dialect (kit/db.py's create_engine names it).
DRIVER_NAME = "sqlite+parley_onehop"
registry.register("sqlite.parley_onehop", __name__, "OneHopDialect")


class InlineReader:
    """Reads outside any transaction, on the event loop's thread and a connection of its own.

    For a read-only request that only reads (``kit.db.read_rows``: a row by id, a page of a list) a
    pooled connection, SQLAlchemy's connection and execution context and the result cost many times
    the read itself (docs/benchmarks.md). This connection is in autocommit mode: a ``SELECT`` is its
    own read transaction, over when its rows are fetched. It never waits (busy time-out 0) and never
    runs long (a progress handler stops it after :data:`INLINE_BUDGET_S`): a busy, locked or stopped
    read answers ``(False, [])`` and the caller reads the usual way. The rows come out as SQLAlchemy's
    would, the columns' types applied (dates, JSON, encrypted values). A connection is only ever used
    by one thread at a time; a second thread that finds it in use reads the usual way.
    """

    def __init__(self, database: str, dialect: Any) -> None:
        self.database = database
        self.dialect = dialect
        self._connection: sqlite3.Connection | None = None
        self._prepared = PreparedReads(dialect)
        self._deadline = 0.0
        self._in_use = threading.Lock()

    @staticmethod
    def for_url(url: Any, dialect: Any) -> InlineReader | None:
        """A reader for a SQLite URL naming a file; None for an in-memory database (another connection
        would see another database)."""
        database = url.database
        if not database or database == ":memory:" or "mode=memory" in str(url) or url.query.get("uri"):
            return None
        return InlineReader(database, dialect)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA busy_timeout=0")
        connection.set_progress_handler(self._past_budget, BUDGET_CHECK_STEPS)
        self._connection = connection
        return connection

    def _past_budget(self) -> bool:
        return time.perf_counter() > self._deadline

    def rows(self, statement: Any, parameters: dict[str, Any]) -> tuple[bool, list[Any]]:
        """(True, the rows) when read here; (False, []) when the caller must read."""
        ready = self._prepared.bound([(statement, parameters)])
        if ready is None:
            return False, []
        (prepared,), (bound,) = ready
        if not self._in_use.acquire(blocking=False):
            return False, []
        try:
            connection = self._connection or self._open()
            self._deadline = time.perf_counter() + INLINE_BUDGET_S
            values = connection.execute(prepared.sql, bound).fetchall()
            if prepared.processors is None:
                prepared.describe(None)  # sqlite3 reports no type codes
        except sqlite3.OperationalError as error:
            if _primary_code(error) in _GIVE_WAY:
                return False, []
            raise
        finally:
            self._in_use.release()
        return True, [prepared.row(row) for row in values]

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


# Commits of the inline writer between two passive checkpoints of the WAL (run on a thread): its own
# connection never checkpoints, so a commit on the event loop never copies pages into the database file.
CHECKPOINT_EVERY = 200

Step = tuple[Any, dict[str, Any]]


class InlineWriter:
    """A whole write transaction on the event loop's thread, on a connection of its own.

    A request whose writes are known at once (a conversation turn: its version-checked ``UPDATE`` and
    the audit event, ``kit.db.commit_now``) pays SQLAlchemy's session, connection, execution context
    and two thread hops (the ``BEGIN IMMEDIATE`` with the first statement, the ``COMMIT``) for a few
    dozen microseconds of SQLite work (docs/benchmarks.md). Here ``BEGIN IMMEDIATE``, the statements
    and ``COMMIT`` run in one synchronous block: no other coroutine runs meanwhile, so the write lock is
    held only for those microseconds and never across an ``await``. It never waits: with the busy
    time-out 0, a database another connection is writing answers ``SQLITE_BUSY`` at ``BEGIN`` and the
    transaction gives way (``(False, [])``: the caller writes the usual way). Any other error rolls
    back and gives way too, so the usual way meets it and reports it as it always does: nothing is ever
    half-written. The statements are compiled once (``kit/prepared.py``) and a statement that lacks a
    value, or needs a default computed per execution, gives way as well.

    This connection never checkpoints the WAL on commit (a checkpoint copies pages and syncs the file);
    every :data:`CHECKPOINT_EVERY` commits a passive checkpoint runs on a thread instead, and the pooled
    connections' commits checkpoint as they always do.
    """

    def __init__(self, database: str, dialect: Any) -> None:
        self.database = database
        self.dialect = dialect
        self._connection: sqlite3.Connection | None = None
        self._prepared = PreparedReads(dialect)
        self._in_use = threading.Lock()
        self._commits = 0

    @staticmethod
    def for_url(url: Any, dialect: Any) -> InlineWriter | None:
        """A writer for a SQLite URL naming a file; None for an in-memory database."""
        if InlineReader.for_url(url, dialect) is None:
            return None
        return InlineWriter(url.database, dialect)

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA busy_timeout=0")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA wal_autocheckpoint=0")
        self._connection = connection
        return connection

    def transaction(self, steps: list[Step]) -> tuple[bool, list[list[Any]]]:
        """(True, each statement's returned rows) once committed here; (False, []) when nothing was
        written and the caller must write the usual way, which is also the answer when the first
        statement returns columns but no row (an ``UPDATE ... RETURNING`` that did not find its row)."""
        ready = self._prepared.bound(steps)
        if ready is None:
            return False, []
        prepared, bound = ready
        if not self._in_use.acquire(blocking=False):
            return False, []
        try:
            connection = self._connection or self._open()
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if _primary_code(error) in _BUSY_OR_LOCKED:
                    return False, []
                raise
            try:
                fetched = []
                for p, values in zip(prepared, bound, strict=True):
                    fetched.append(connection.execute(p.sql, values).fetchall())
                    if len(fetched) == 1 and not fetched[0] and p.columns:
                        connection.execute("ROLLBACK")  # its row was not there: the caller decides
                        return False, []
                connection.execute("COMMIT")
            except sqlite3.Error:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                return False, []
        finally:
            self._in_use.release()
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY == 0:
            self._checkpoint_soon()
        rows = []
        for p, values in zip(prepared, fetched, strict=True):
            if p.processors is None:
                p.describe(None)  # sqlite3 reports no type codes
            rows.append([p.row(value) for value in values])
        return True, rows

    def _checkpoint_soon(self) -> None:
        uri = f"{Path(self.database).resolve().as_uri()}?mode=rw"  # never creates a file

        def checkpoint() -> None:
            try:
                connection = sqlite3.connect(uri, uri=True, isolation_level=None)
            except sqlite3.Error:
                return  # the database is gone (a test's temporary directory)
            try:
                connection.execute("PRAGMA busy_timeout=0")
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:
                pass  # busy: the next one, or a pooled connection's commit, checkpoints
            finally:
                connection.close()

        threading.Thread(target=checkpoint, name="parley-wal-checkpoint", daemon=True).start()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
