"""PostgreSQL through asyncpg with ``BEGIN`` deferred to the first statement that needs a transaction.

SQLAlchemy's asyncpg adapter opens a transaction (``BEGIN``, one round trip) before a connection's
first statement and ends it with ``COMMIT`` or ``ROLLBACK`` (another one), so a request that reads one
row made three round trips to the server, two of them for a transaction that changed nothing
(docs/benchmarks.md, issue 16).

:func:`dbapi` is the adapter with one change: while no transaction is open, a plain read (a ``SELECT``
without a locking clause, ``INTO`` or a function known to have side effects, see :func:`plain_read`)
runs on its own, outside a transaction. The first other statement — a write, ``FOR UPDATE``, a
``SAVEPOINT``, anything else — opens the transaction as before, and every statement after it runs in
it until ``COMMIT``/``ROLLBACK``; a connection whose statements were all plain reads has no
transaction to end, so its commit, rollback and the pool's reset make no round trip.

What a unit of work sees does not change under PostgreSQL's default isolation, read committed: each
statement sees what was committed before it began, inside a transaction or not, and before its first
write a transaction has nothing of its own to see. The reads before the first write are simply not
part of the transaction, which at read committed they could not tell. A connection set to another
isolation level (``REPEATABLE READ``, ``SERIALIZABLE``: one snapshot for the whole transaction) or
to ``AUTOCOMMIT`` keeps the adapter's own behaviour, and so do server-side cursors (which need a
transaction).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import structlog
from sqlalchemy.dialects.postgresql.asyncpg import (
    AsyncAdapt_asyncpg_connection,
    AsyncAdapt_asyncpg_cursor,
    AsyncAdapt_asyncpg_dbapi,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import await_, greenlet_spawn

from parley.kit.prepared import MAX_PREPARED, PreparedRead, PreparedReads

# Isolation levels at which each statement takes its own snapshot (None: the server's default, which
# the platform leaves at read committed).
_PER_STATEMENT_SNAPSHOT = frozenset({None, "read_committed"})

# A SELECT that locks rows, creates a table, or calls a function that changes something outside the
# statement (a sequence, an advisory lock, a setting, a notification, a transaction id, large objects)
# must run in the transaction it belongs to.
_NOT_PLAIN = re.compile(
    r"\bFOR\s+(?:NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b"
    r"|\bINTO\b"
    r"|\b(?:nextval|setval|pg_advisory\w*|pg_try_advisory\w*|set_config|pg_notify"
    r"|txid_current\w*|pg_current_xact_id\w*|lo_\w+)\s*\(",
    re.IGNORECASE,
)


# Set by DeferredBeginCursor around a plain read, for its own task only: a statement of another task
# waiting for the same connection's mutex meanwhile still begins its transaction.
_HOLD_BEGIN: contextvars.ContextVar[bool] = contextvars.ContextVar("parley_hold_begin", default=False)


@functools.lru_cache(maxsize=1024)
def plain_read(sql: str) -> bool:
    """True for a statement that may run outside a transaction: a ``SELECT`` that reads only."""
    return sql.lstrip()[:6].upper() == "SELECT" and _NOT_PLAIN.search(sql) is None


class DeferredBeginCursor(AsyncAdapt_asyncpg_cursor):
    """The adapter's cursor; a plain read with no transaction open runs without opening one."""

    __slots__ = ()

    async def _prepare_and_execute(self, operation: str, parameters: Any) -> None:
        connection = self._adapt_connection
        if not (
            connection._transaction is None
            and connection.isolation_level in _PER_STATEMENT_SNAPSHOT
            and plain_read(operation)
        ):
            await super()._prepare_and_execute(operation, parameters)  # type: ignore[no-untyped-call]
            return
        held = _HOLD_BEGIN.set(True)
        try:
            await super()._prepare_and_execute(operation, parameters)  # type: ignore[no-untyped-call]
        finally:
            _HOLD_BEGIN.reset(held)


class DeferredBeginConnection(AsyncAdapt_asyncpg_connection):
    """The adapter's connection; ``BEGIN`` waits while :class:`DeferredBeginCursor` runs a plain read."""

    __slots__ = ()
    _cursor_cls = DeferredBeginCursor

    async def _start_transaction(self) -> None:
        if not _HOLD_BEGIN.get():
            await super()._start_transaction()  # type: ignore[no-untyped-call]


class DeferredBeginDBAPI(AsyncAdapt_asyncpg_dbapi):
    """SQLAlchemy's asyncpg DB-API module, making :class:`DeferredBeginConnection` connections."""

    def connect(self, *args: Any, **kwargs: Any) -> DeferredBeginConnection:
        creator = kwargs.pop("async_creator_fn", self.asyncpg.connect)
        cache_size = kwargs.pop("prepared_statement_cache_size", 100)
        name_func = kwargs.pop("prepared_statement_name_func", None)
        connection: DeferredBeginConnection = await_(
            DeferredBeginConnection.create(
                self,
                creator(*args, **kwargs),
                prepared_statement_cache_size=cache_size,
                prepared_statement_name_func=name_func,
            )
        )
        return connection


@functools.cache
def dbapi() -> DeferredBeginDBAPI:
    """The module to hand to ``create_async_engine(..., module=dbapi())`` for a PostgreSQL URL."""
    return DeferredBeginDBAPI(asyncpg)  # type: ignore[no-untyped-call]


log = structlog.get_logger("parley.db")


async def _check_out(pool: Any, ready: Callable[[Any], bool], dialect: Any) -> Any:
    """A connection of the pool: at once when one used a moment ago is idle, else in a greenlet (the
    check-out may wait, connect or ping).

    What the driver raises while connecting (the server refuses: too many connections, starting up) is
    wrapped as the engine wraps it (``DBAPIError``): the pool alone hands it on bare, and the app's
    error handlers answer only SQLAlchemy's errors by their SQLSTATE (503 for "unavailable, retry")."""
    at_once = getattr(pool, "connect_at_once", None)
    fairy: Any = at_once(ready) if at_once is not None else None
    if fairy is not None:
        return fairy
    dbapi_error = dialect.loaded_dbapi.Error
    try:
        return await greenlet_spawn(pool.connect)
    except dbapi_error as error:
        raise DBAPIError.instance(None, None, error, dbapi_error, dialect=dialect) from error


async def _check_in(pool: Any, fairy: Any) -> None:
    """Give a checked-out connection back: at once when the pool keeps it, else in a greenlet, where
    the pool may close it (a connection beyond the pool's size given back while the pool is full of
    idle ones is closed, which awaits the driver)."""
    queue = getattr(pool, "_pool", None)
    if queue is not None and queue.full():
        await greenlet_spawn(fairy.close)
    else:
        fairy.close()


def _idle_driver(fairy: Any) -> Any:
    """The asyncpg connection of a checked-out connection with no transaction open at read committed
    (each statement its own snapshot), or None."""
    adapted = fairy.dbapi_connection
    if (
        adapted is None
        or adapted._transaction is not None
        or adapted.isolation_level not in _PER_STATEMENT_SNAPSHOT
    ):
        return None
    return adapted.driver_connection


async def _describe(driver: Any, prepared: PreparedRead) -> None:
    """The columns' conversions, from the type codes the server reports for the statement."""
    if prepared.processors is not None:
        return
    if not prepared.columns:
        prepared.describe(None)
        return
    described = await driver.prepare(prepared.sql)
    prepared.describe([attribute.type.oid for attribute in described.get_attributes()])


# A coalesced query's sizes: a batch is padded up to the next one (its last read repeated), so each
# statement has a handful of prepared forms, none padding its batch by more than two fifths.
_BATCH_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32)
# The column a coalesced query adds after the statement's own: which read the row answers.
_BRANCH = "parley_branch"

# A read waiting for the next query of its statement: its bound values and the caller's answer.
_Waiter = tuple[list[Any], "asyncio.Future[tuple[bool, list[Any]]]"]


def coalesced(prepared: PreparedRead, size: int) -> str | None:
    """``size`` reads of ``prepared`` (a one-row statement) as one query: each read's statement, its
    parameters numbered after the reads before it, as one branch of a ``UNION ALL`` that adds the
    branch's number as a last column. None when the statement's SQL cannot be renumbered."""
    width = len(prepared.binds)
    branches = []
    for branch in range(size):
        sql = _renumbered(prepared, branch * width)
        if sql is None:
            return None
        # Compiled SQL of the platform's own statements, every value a parameter: nothing is injected.
        branches.append(f"SELECT *, {branch} AS {_BRANCH} FROM ({sql}) AS {_BRANCH}_{branch}")  # noqa: S608
    return " UNION ALL ".join(branches)


class PooledReader:
    """Reads outside any transaction, straight on asyncpg with a connection of the pool.

    For a read-only request that only reads (``kit.db.read_rows``: a row by id, a page of a list)
    SQLAlchemy's connection, execution context and result around asyncpg cost several times the round
    trip's own CPU (docs/benchmarks.md). The connection is checked out of and back into the engine's pool (so
    the pool's size, waits, idle pings and recycling apply as to every other request); the statement,
    compiled once by the engine's dialect (at its second use, ``kit/prepared.py``), runs with asyncpg's ``fetch`` outside a transaction, as the
    adapter runs a plain read with no transaction open (see above), and its values go through the
    columns' types. A connection that breaks meanwhile (or whose read is cancelled halfway) is closed,
    never reused, and the caller reads the usual way (which reconnects, or answers an outage as every
    other statement does); an error the server reports for the statement is raised by the usual way.

    Under load, reads of a one-row statement (``kit.prepared.one_row``: a look-up by id) are coalesced.
    A read that finds no query running is sent at once (a lone request waits for nothing). Reads that
    arrive while one runs are gathered: those of one turn of the event loop leave together, as one
    query (:func:`coalesced`), at its next turn, or, while ``max_in_flight`` queries run, as soon as one
    of them ends. One round trip, one backend wake-up and one result to decode serve many requests,
    where a query per read cost the server about 40 % more CPU per request under load and left the
    database's backends competing for the cores (docs/benchmarks.md, issue 16).
    A read only ever joins a query that has not been sent yet, so each answer was read after its
    request asked: never older data than a query of its own would give. Each read's rows are the ones
    of its own branch, with its own values (the organization's among them). When the query fails,
    every read of it is told to read the usual way, which meets the same error and reports it.
    """

    def __init__(
        self,
        engine: Any,
        *,
        ready: Callable[[Any], bool] = lambda _record: False,
        max_in_flight: int | None = None,
    ) -> None:
        self.pool = engine.sync_engine.pool
        self.dialect = engine.dialect
        # ``ready(record)``: the engine's checkout listeners need no I/O for that idle connection
        # (kit.db's idle ping); then it is checked out without a greenlet.
        self.ready = ready
        self._prepared = PreparedReads(engine.dialect)
        size = self.pool.size() if hasattr(self.pool, "size") else 1
        # Half the pool: writes, and the reads of statements that are not coalesced, keep the rest.
        self.max_in_flight = max_in_flight or max(1, size // 2)
        self._in_flight = 0  # queries running (counted synchronously, before their first await)
        self._waiting: dict[PreparedRead, list[_Waiter]] = {}  # by statement, in arrival order
        self._starting: asyncio.Task[None] | None = None  # a sender that has not taken the waiting reads yet
        self._senders: set[asyncio.Task[None]] = set()  # kept from the garbage collector until done
        self._coalesced: dict[tuple[PreparedRead, int], str | None] = {}
        self.queries = 0  # coalesced queries sent: visible to tests and diagnostics

    async def rows(self, statement: Any, parameters: dict[str, Any]) -> tuple[bool, list[Any]]:
        """(True, the rows) when read here; (False, []) when the caller must read."""
        ready = self._prepared.bound([(statement, parameters)])
        if ready is None:
            return False, []
        (prepared,), (values,) = ready
        if not prepared.one_row or (self._in_flight == 0 and not self._waiting):
            self._in_flight += 1
            try:
                return await self._read(prepared, values)
            finally:
                self._in_flight -= 1
                self._send_waiting()
        future: asyncio.Future[tuple[bool, list[Any]]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(prepared, []).append((values, future))
        self._send_waiting()
        return await future

    async def _read(self, prepared: PreparedRead, values: list[Any]) -> tuple[bool, list[Any]]:
        async def fetch(driver: Any) -> list[Any]:
            await _describe(driver, prepared)
            records: list[Any] = await driver.fetch(prepared.sql, *values)
            return records

        read, records = await self._on_idle_driver(fetch)
        return (True, [prepared.row(record) for record in records]) if read else (False, [])

    async def _on_idle_driver(self, work: Callable[[Any], Awaitable[list[Any]]]) -> tuple[bool, list[Any]]:
        """``work(driver)`` on an idle pooled connection, outside any transaction: (True, its answer),
        or (False, []) when the caller must read the usual way.

        A connection that breaks meanwhile (or whose work is cancelled halfway) is closed, never
        reused; an error the server reports for a statement leaves it to the usual way, which runs the
        statement again and reports the error as it always does."""
        fairy = await _check_out(self.pool, self.ready, self.dialect)
        try:
            driver = _idle_driver(fairy)
            if driver is None:
                return False, []
            return True, await work(driver)
        except asyncpg.PostgresError as error:
            if driver.is_closed():  # the server ended the connection (a shutdown, a terminated backend)
                fairy.invalidate(error)
            return False, []
        except BaseException as error:
            # Lost, broken or cancelled halfway through a statement: the connection's state is unknown,
            # so it is closed (outside a greenlet SQLAlchemy terminates it without waiting), never reused.
            fairy.invalidate(error)
            if not isinstance(error, Exception):
                raise  # a cancellation goes on
            log.warning("row_reader_gave_way", error=type(error).__name__)
            return False, []
        finally:
            if fairy.is_valid:
                await _check_in(self.pool, fairy)  # no transaction was opened: no round trip to end it

    def _send_waiting(self) -> None:
        """Start a sender for the waiting reads when a query is free and none is about to take them."""
        if self._waiting and self._starting is None and self._in_flight < self.max_in_flight:
            self._in_flight += 1
            sender = self._starting = asyncio.get_running_loop().create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._sender_done)

    async def _send(self) -> None:
        """Send the waiting reads, each statement's as one query, then again while more are waiting."""
        self._starting = None
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                await self._answer(batch)
        finally:
            # In the same step as the last look at the queue: a read queued after it starts a sender.
            self._in_flight -= 1
            self._send_waiting()

    def _sender_done(self, sender: asyncio.Task[None]) -> None:
        self._senders.discard(sender)
        if self._starting is sender:  # cancelled before it ran (a loop shutting down): undo its start
            self._starting = None
            self._in_flight -= 1
            waiting, self._waiting = self._waiting, {}
            _give_way([waiter for group in waiting.values() for waiter in group])

    async def _answer(self, batch: dict[PreparedRead, list[_Waiter]]) -> None:
        """Answer every waiting read of ``batch`` (one query per statement and chunk, on one
        connection); a read whose caller gave up meanwhile is skipped. When the connection cannot
        serve them, each read not yet answered reads the usual way."""

        async def answer_all(driver: Any) -> list[Any]:
            for prepared, group in batch.items():
                await _describe(driver, prepared)
                for start in range(0, len(group), _BATCH_SIZES[-1]):
                    await self._answer_chunk(driver, prepared, group[start : start + _BATCH_SIZES[-1]])
            return []

        waiters = [waiter for group in batch.values() for waiter in group]
        try:
            answered, _ = await self._on_idle_driver(answer_all)
        except BaseException:
            _give_way(waiters)
            raise
        if not answered:
            _give_way(waiters)

    async def _answer_chunk(self, driver: Any, prepared: PreparedRead, chunk: list[_Waiter]) -> None:
        if len(chunk) == 1:
            values, future = chunk[0]
            records = await driver.fetch(prepared.sql, *values)
            if not future.done():
                future.set_result((True, [prepared.row(record) for record in records]))
            return
        size = next(size for size in _BATCH_SIZES if size >= len(chunk))
        key = (prepared, size)
        try:
            sql = self._coalesced[key]
        except KeyError:
            sql = coalesced(prepared, size)
            if len(self._coalesced) < MAX_PREPARED:
                self._coalesced[key] = sql
        if sql is None:  # not renumberable: one query per read
            for waiter in chunk:
                await self._answer_chunk(driver, prepared, [waiter])
            return
        padding = [chunk[-1][0]] * (size - len(chunk))
        self.queries += 1
        records = await driver.fetch(sql, *itertools.chain.from_iterable([v for v, _ in chunk] + padding))
        answers: list[list[Any]] = [[] for _ in chunk]
        for record in records:
            branch = record[-1]
            if branch < len(chunk):
                answers[branch].append(prepared.row(record[:-1]))
        for (_, future), rows in zip(chunk, answers, strict=True):
            if not future.done():
                future.set_result((True, rows))


def _give_way(waiters: list[_Waiter]) -> None:
    """Tell every waiting read not yet answered to read the usual way."""
    for _, future in waiters:
        if not future.done():
            future.set_result((False, []))


class _NoRow(Exception):
    """The first statement returned no row: nothing is kept and the caller decides."""


# --- a write transaction as one statement --------------------------------------------------------

# The name of step n's WITH query in a merged transaction.
_STEP = "parley_step_{}"
# A parameter of a compiled statement ($1, $2, ...), not part of an identifier.
_PARAMETER = re.compile(r"(?<![\w$])\$(\d+)\b")
# A string or dollar-quoted literal, in which a ``$n`` would be text: a statement holding one is not
# renumbered (the platform's statements bind every value, so compiled SQL has none).
_LITERAL = re.compile(r"'|\$[A-Za-z_]*\$")
_SELECT = re.compile(r"\bSELECT\b", re.IGNORECASE)
_WRITES = ("INSERT ", "UPDATE ", "DELETE ")


def _renumbered(prepared: PreparedRead, offset: int) -> str | None:
    """The statement with its parameters numbered after ``offset`` others, or None when its SQL is not
    exactly ``$1``..``$n`` for its n bound values."""
    sql = prepared.sql
    numbers = {int(number) for number in _PARAMETER.findall(sql)}
    if _LITERAL.search(sql) is not None or numbers != set(range(1, len(prepared.binds) + 1)):
        return None
    return _PARAMETER.sub(lambda number: f"${int(number[1]) + offset}", sql) if offset else sql


def _if_first_returned(insert: str) -> str | None:
    """``INSERT INTO t (a, b) VALUES (x, y)`` as ``INSERT INTO t (a, b) SELECT x, y WHERE EXISTS
    (SELECT 1 FROM <step 0>)``: no row unless the first statement returned one. The values are typed
    by the columns they go to as in ``VALUES`` (the dialect casts its binds, and an untyped parameter
    takes the column's type in both forms; tests/kit/test_pooled_writer.py)."""
    head, values_clause, values = insert.partition(") VALUES (")
    if not values_clause or not values.endswith(")"):
        return None
    # Compiled SQL of the platform's own statements, every value a parameter: nothing is injected.
    return f"{head}) SELECT {values[:-1]} WHERE EXISTS (SELECT 1 FROM {_STEP.format(0)})"  # noqa: S608


def merged_transaction(prepared: Sequence[PreparedRead]) -> str | None:
    """The statements of a write transaction as one statement, or None when they cannot be merged.

    PostgreSQL runs a statement outside ``BEGIN`` in a transaction of its own, so one statement that
    makes all the writes commits them all or none, in one round trip instead of ``BEGIN``, one per
    statement and ``COMMIT``. The first statement is any ``INSERT``, ``UPDATE`` or ``DELETE``; it and
    every other one become queries of a ``WITH``, the others only when they are plain one-row inserts
    (``PreparedRead.plain_insert``) whose values read no table: all the queries of a ``WITH`` see the
    database as it was before the statement began, where in the transaction each statement sees what
    the ones before it wrote, and an insert of values reads nothing, so it cannot tell. When the first
    statement returns columns, the inserts are made conditional on it having returned a row (the
    transaction rolls back when it returns none) and the statement answers its rows (``SELECT * FROM
    parley_step_0``); otherwise the last insert is the main statement. The parameters are the steps'
    bound values one after another: each statement's ``$n`` are numbered after the ones before it.
    """
    first = prepared[0]
    if len(prepared) == 1:
        return first.sql  # a single statement needs no BEGIN either
    # What it returns decides the form: the SQL must say the same as the statement's columns.
    if not first.sql.startswith(_WRITES) or bool(first.columns) != (" RETURNING " in first.sql):
        return None
    queries: list[str] = []
    offset = 0
    for index, step in enumerate(prepared):
        sql = _renumbered(step, offset)
        offset += len(step.binds)
        if sql is not None and index:
            if not step.plain_insert or not sql.startswith("INSERT INTO ") or _SELECT.search(sql):
                return None
            if first.columns:
                sql = _if_first_returned(sql)
        if sql is None:
            return None
        queries.append(sql)
    main = f"SELECT * FROM {_STEP.format(0)}" if first.columns else queries.pop()  # noqa: S608
    named = ", ".join(f"{_STEP.format(index)} AS ({sql})" for index, sql in enumerate(queries))
    return f"WITH {named} {main}"


class PooledWriter:
    """A whole write transaction straight on asyncpg, with a connection of the pool.

    The PostgreSQL side of ``kit.db.commit_now`` (see ``kit.sqlite.InlineWriter``), on a connection
    checked out of the engine's pool as :class:`PooledReader` does; the statements are compiled once
    and their values go through the parameters' types. A transaction of the usual shape (a statement,
    then plain inserts: a turn's ``UPDATE ... RETURNING`` and its audit event) runs as one statement
    (:func:`merged_transaction`, built once per tuple of statements): one round trip, in PostgreSQL's
    implicit transaction of a single statement. Any other shape runs as ``BEGIN``, each statement and
    ``COMMIT`` with asyncpg's own transaction. Any error the server reports writes nothing and gives
    way (``(False, [])``): the caller writes the usual way, which meets the same error and reports it
    as it always does. A connection that breaks or is cancelled meanwhile is closed, never reused.
    """

    def __init__(self, engine: Any, *, ready: Callable[[Any], bool] = lambda _record: False) -> None:
        self.pool = engine.sync_engine.pool
        self.dialect = engine.dialect
        self.ready = ready
        self._prepared = PreparedReads(engine.dialect)
        # Each tuple of statements' merged SQL (None: not mergeable), bounded as PreparedReads is.
        self._merged: dict[tuple[PreparedRead, ...], str | None] = {}

    async def transaction(self, steps: list[tuple[Any, dict[str, Any]]]) -> tuple[bool, list[list[Any]]]:
        """(True, each statement's returned rows) once committed; (False, []) when nothing was written,
        which is also the answer when the first statement returns columns but no row."""
        ready = self._prepared.bound(steps)
        if ready is None:
            return False, []
        prepared, bound = ready
        merged = self._merged_sql(prepared)
        fairy = await _check_out(self.pool, self.ready, self.dialect)
        try:
            driver = _idle_driver(fairy)
            if driver is None:
                return False, []
            for p in prepared:
                await _describe(driver, p)
            if merged is None:
                fetched = await _in_transaction(driver, prepared, bound)
            else:
                records = await driver.fetch(merged, *itertools.chain.from_iterable(bound))
                if not records and prepared[0].columns:
                    raise _NoRow  # and the inserts, conditional on its row, wrote nothing
                fetched = [records, *([] for _ in prepared[1:])]
        except _NoRow:
            return False, []
        except asyncpg.PostgresError as error:
            if driver.is_closed():
                fairy.invalidate(error)
            return False, []
        except BaseException as error:
            fairy.invalidate(error)
            if not isinstance(error, Exception):
                raise
            log.warning("pooled_writer_gave_way", error=type(error).__name__)
            return False, []
        finally:
            if fairy.is_valid:
                await _check_in(self.pool, fairy)
        return True, [
            [p.row(record) for record in records] for p, records in zip(prepared, fetched, strict=True)
        ]

    def _merged_sql(self, prepared: list[PreparedRead]) -> str | None:
        key = tuple(prepared)
        try:
            return self._merged[key]
        except KeyError:
            pass
        sql = merged_transaction(prepared)
        if len(self._merged) < MAX_PREPARED:
            self._merged[key] = sql
        return sql


async def _in_transaction(driver: Any, prepared: list[PreparedRead], bound: list[list[Any]]) -> list[Any]:
    """Each statement's records, run between ``BEGIN`` and ``COMMIT`` (rolled back on an error or
    when the first statement returns columns but no row: :class:`_NoRow`)."""
    fetched: list[Any] = []
    try:
        # Plain BEGIN/COMMIT (the server's default isolation, read committed, as every unit of work)
        await driver.execute("BEGIN")
        for p, values in zip(prepared, bound, strict=True):
            fetched.append(await driver.fetch(p.sql, *values))
            if len(fetched) == 1 and not fetched[0] and p.columns:
                raise _NoRow
        await driver.execute("COMMIT")
    except (_NoRow, asyncpg.PostgresError):
        if not driver.is_closed() and driver.is_in_transaction():
            await driver.execute("ROLLBACK")
        raise
    return fetched
