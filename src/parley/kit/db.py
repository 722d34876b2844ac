"""Database: declarative base, engine set-up for SQLite and PostgreSQL, and the request session.

One transaction per request: the ``get_session`` dependency opens it and commits after the handler
returns (before the response is sent, so a failed commit is an error response, never a silent loss).
Services only ``flush``. Callbacks registered with :func:`after_commit` (job enqueues) run after it.
Every commit of the platform goes through :func:`unit_of_work` (the request dependency builds on it).
On PostgreSQL the transaction begins with its first statement that is not a plain read
(:mod:`parley.kit.postgres`): a unit that only reads sends no ``BEGIN``, ``COMMIT`` or ``ROLLBACK``.
"""

from __future__ import annotations

import functools
import json
import re
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import Depends, Request
from sqlalchemy import DateTime, Engine, Executable, MetaData, Row, String, bindparam, event, insert
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.types import TypeDecorator
from sqlalchemy.util import await_, greenlet_spawn

from parley.kit import postgres
from parley.kit.pool import FairAsyncAdaptedQueuePool
from parley.kit.postgres import PooledReader, PooledWriter
from parley.kit.sqlite import DRIVER_NAME as SQLITE_DRIVER
from parley.kit.sqlite import InlineReader, InlineWriter, connect_one_hop

if TYPE_CHECKING:
    from parley.config import Settings

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both engines (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, nullable=False
    )


class OrgScopedMixin:
    """Every organization-owned row carries its organization; queries go through ``scoped``."""

    organization_id: Mapped[str] = mapped_column(String(40), index=True, nullable=False)


def _configure_sqlite(engine: AsyncEngine, busy_timeout: float) -> None:
    # pysqlite's own transaction handling breaks SAVEPOINT: BEGIN is sent by the dialect (kit/sqlite.py's
    # OneHopDialect), DEFERRED or what the engine's execution option sqlite_begin asks for (the writers
    # take the write lock up front with IMMEDIATE: a deferred transaction that upgrades to a writer
    # under concurrency fails with SQLITE_BUSY instead of waiting).
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()


@dataclass(frozen=True)
class Timeouts:
    """How long the database may take, so an outage fails fast (503) instead of hanging requests.

    ``connect``: opening a PostgreSQL connection. ``statement``: one statement, enforced by the server
    (``statement_timeout``) and, a little later, by the client (asyncpg's ``command_timeout``, which
    also covers a server that stopped answering). ``busy``: on SQLite, how long a writer waits for
    the write lock. ``recycle``: pooled connections older than this are replaced (load balancers and failovers drop
    idle connections silently). A PostgreSQL connection that sat idle in the pool for
    :data:`PING_AFTER_IDLE_S` or longer is pinged before use (one round trip), so connections broken by a
    database restart are replaced instead of failing the request (see :func:`_ping_idle_connections`).
    """

    connect: float = 5.0
    statement: float = 30.0
    busy: float = 10.0
    recycle: float = 1800.0


def dumps_json(value: Any) -> str:
    """JSON columns are written with orjson (conversation states are large and written every turn);
    what orjson refuses (an integer beyond 64 bits) is written as the standard library would."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


# orjson reads an integer beyond 64 bits as a float, losing digits: text with a run of 20 digits (maybe
# such an integer, maybe only a string) is read by the standard library, which keeps them.
_LONG_NUMBER = re.compile(r"[0-9]{20}")


def loads_json(text: str) -> Any:
    """JSON columns are read with orjson; what it refuses (``NaN``, which the standard library once
    wrote on SQLite) or could misread is read as the standard library would."""
    if _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def create_engine(
    url: str, *, pool_size: int = 20, pool_timeout: float = 10.0, timeouts: Timeouts | None = None
) -> AsyncEngine:
    timeouts = timeouts or Timeouts()
    if url.startswith("sqlite"):
        engine = create_async_engine(
            make_url(url).set(drivername=SQLITE_DRIVER),
            poolclass=FairAsyncAdaptedQueuePool,  # waiting requests served in turn (kit/pool.py)
            pool_size=pool_size,
            max_overflow=0,
            pool_timeout=pool_timeout,
            connect_args={"async_creator_fn": connect_one_hop},  # one thread hop per statement
            json_serializer=dumps_json,
            json_deserializer=loads_json,
        )
        _configure_sqlite(engine, timeouts.busy)
        return engine
    engine = create_async_engine(
        url,
        # BEGIN waits for the first statement that is not a plain read (kit/postgres.py)
        **({"module": postgres.dbapi()} if url.startswith("postgresql+asyncpg://") else {}),
        poolclass=FairAsyncAdaptedQueuePool,  # waiting requests served in turn (kit/pool.py)
        pool_size=pool_size,
        max_overflow=pool_size // 2,
        pool_timeout=pool_timeout,
        pool_recycle=timeouts.recycle,
        json_serializer=dumps_json,
        json_deserializer=loads_json,
        connect_args={
            "timeout": timeouts.connect,
            "command_timeout": timeouts.statement + 5,
            "server_settings": {"statement_timeout": str(int(timeouts.statement * 1000))},
        },
    )
    _ping_idle_connections(engine)
    return engine


PING_AFTER_IDLE_S = 1.0


def _ping_idle_connections(engine: AsyncEngine) -> None:
    """Ping a pooled PostgreSQL connection before use when it sat idle for a second or more.

    SQLAlchemy's ``pool_pre_ping`` pings every checkout, in a transaction of its own (three round trips:
    BEGIN, the ping, ROLLBACK), which was the largest part of a simple read (docs/benchmarks.md). A
    connection given back a moment ago by a request that used it is alive; one that waited in the pool
    (where a database restart or an idle time-out breaks connections unseen) gets one autocommit round
    trip, and a dead one is replaced — the pool retries the checkout with a new connection. A connection
    that breaks while in steady use fails its statement, which answers 503 and invalidates the pool.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _stamp_new(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkin")
    def _stamp(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if needs_no_ping(record):
            return
        try:
            await_(dbapi_connection.driver_connection.fetchrow(";"))
        except Exception as error:  # any failure: this connection is gone, the pool makes another
            raise DisconnectionError(f"idle connection failed its ping: {type(error).__name__}") from error


def needs_no_ping(record: Any) -> bool:
    """True when a pooled connection was used too recently for the idle ping (see below) to run."""
    idle_since: float = record.info.get("idle_since", 0.0)
    return time.monotonic() - idle_since < PING_AFTER_IDLE_S


@dataclass
class Database:
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    write_sessionmaker: async_sessionmaker[AsyncSession]
    # Reads of read-only requests around SQLAlchemy's connection (see read_rows): SQLite files on the
    # event loop, PostgreSQL straight on asyncpg.
    inline_reader: InlineReader | None = None
    pooled_reader: PooledReader | None = None
    # A request's whole write on the driver when it is known at once (see commit_now).
    inline_writer: InlineWriter | None = None
    pooled_writer: PooledWriter | None = None

    @classmethod
    def from_url(
        cls, url: str, *, pool_size: int = 20, pool_timeout: float = 10.0, timeouts: Timeouts | None = None
    ) -> Database:
        engine = create_engine(url, pool_size=pool_size, pool_timeout=pool_timeout, timeouts=timeouts)
        sqlite = url.startswith("sqlite")
        writer = engine.execution_options(sqlite_begin="IMMEDIATE") if sqlite else engine
        return cls(
            engine,
            async_sessionmaker(engine, expire_on_commit=False, autoflush=False),
            async_sessionmaker(writer, expire_on_commit=False, autoflush=False),
            InlineReader.for_url(engine.url, engine.dialect) if sqlite else None,
            PooledReader(engine, ready=needs_no_ping) if url.startswith("postgresql+asyncpg://") else None,
            InlineWriter.for_url(engine.url, engine.dialect) if sqlite else None,
            PooledWriter(engine, ready=needs_no_ping) if url.startswith("postgresql+asyncpg://") else None,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        """The database of ``settings``: pool size, pool wait and the time-outs (PARLEY_DB_*)."""
        return cls.from_url(
            settings.resolved_database_url,
            pool_size=settings.db_pool_size,
            pool_timeout=settings.db_pool_timeout,
            timeouts=Timeouts(
                connect=settings.db_connect_timeout,
                statement=settings.db_statement_timeout,
                busy=settings.db_busy_timeout,
                recycle=settings.db_pool_recycle,
            ),
        )

    @functools.cached_property
    def reads_beside_sessions(self) -> bool:
        """True when the read sessions are bound to the engine: a read beside one sees what it sees.
        Sessions bound to one connection (the tests' outer transaction) are read through, never beside."""
        return self.sessionmaker.kw.get("bind") is self.engine

    async def dispose(self) -> None:
        if self.inline_reader is not None:
            self.inline_reader.close()
        if self.inline_writer is not None:
            self.inline_writer.close()
        await self.engine.dispose()


AfterCommit = Callable[[], Awaitable[None]]
BeforeCommit = Callable[[AsyncSession], Awaitable[None]]


def before_commit(session: AsyncSession, hook: BeforeCommit) -> None:
    """Run ``hook`` inside the unit of work's transaction, just before it commits (e.g. the audit event)."""
    session.info.setdefault("before_commit", []).append(hook)


@functools.cache
def plain_insert(table: Any, columns: tuple[str, ...]) -> Executable:
    """An INSERT into ``table`` with each of ``columns`` a named value and no other (no column default
    computed per execution): built once per set of columns, so the driver writers of
    :func:`commit_now` compile it once. Callers pass ``tuple(values)`` of the row they write."""
    return insert(table).values({name: bindparam(name) for name in columns})


class PlainStatement:
    """A before-commit hook that is one plain Core statement with its values (the audit event): the
    usual commit executes it in the session; :func:`commit_now` writes it with the request's own
    statement, in one transaction on the driver. ``values`` is called at commit time."""

    def __init__(self, statement: Executable, values: Callable[[], dict[str, Any]]) -> None:
        self.statement = statement
        self.values = values

    async def __call__(self, session: AsyncSession) -> None:
        await session.execute(self.statement, self.values())


def after_commit(session: AsyncSession, callback: AfterCommit) -> None:
    """Run ``callback`` once the unit of work has committed (e.g. to enqueue a job)."""
    session.info.setdefault("after_commit", []).append(callback)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


# --- the unit of work ---------------------------------------------------------------------------
#
# The one place that commits. Every entry point (a request, a streamed turn, a voice call, a webhook,
# a job, the sweeper, the seed) writes through ``unit_of_work``: open a session, let the caller work,
# run the before-commit hooks, commit, run the after-commit hooks; roll back on any error.


def _commit(session: Session) -> None:
    session.commit()  # the platform's one commit: everything else reaches it through the unit of work


def _wrote(session: Session) -> bool:
    """True when ``session`` has flushed writes in its open transaction (seen by ``after_flush``)."""
    return bool(session.info.get("_flushed"))


@event.listens_for(Session, "after_flush")
def _mark_flushed(session: Session, _context: Any) -> None:
    session.info["_flushed"] = True


@event.listens_for(Session, "after_transaction_end")
def _clear_flushed(session: Session, transaction: Any) -> None:
    if transaction.parent is None:
        session.info.pop("_flushed", None)


def _has_work(session: AsyncSession) -> bool:
    """Anything a commit would keep or run: changed objects, flushed writes, hooks."""
    sync = session.sync_session
    return bool(
        sync.new
        or sync.dirty
        or sync.deleted
        or _wrote(sync)
        or sync.info.get("before_commit")
        or sync.info.get("after_commit")
    )


async def _finish(session: AsyncSession) -> None:
    """Commit ``session``'s work: before-commit hooks, the commit, then the after-commit hooks."""
    while hooks := session.info.pop("before_commit", []):  # a hook may register another
        for hook in hooks:
            await hook(session)
    await session.run_sync(_commit)
    for callback in session.info.pop("after_commit", []):
        await callback()


async def checkpoint(session: AsyncSession) -> None:
    """Commit what a unit of work has written so far and go on in a new transaction; its hooks wait for
    the end. For a lease other processes must see before the unit talks to the outside world."""
    await session.run_sync(_commit)


@asynccontextmanager
async def unit_of_work(
    database: Database,
    *,
    write: bool = True,
    commit: bool | None = None,
    jobs: Any = None,
    info: dict[str, Any] | None = None,
) -> AsyncIterator[AsyncSession]:
    """A session whose work commits when the block ends (hooks included) and rolls back on error.

    ``write=False`` opens a read session: nothing is committed and the connection is given back when
    the block ends, so it can wrap a short look-up before outbound I/O. A session that has not run a
    statement yet holds no connection. ``commit`` overrides whether the block commits (a GET request
    reads without SQLite's write lock, yet commits what authentication noted). ``jobs`` is the queue
    after-commit enqueues go to.
    """
    maker = database.write_sessionmaker if write else database.sessionmaker
    async with maker() as session:
        if info is not None:
            session.sync_session.info = info
        session.info["database"] = database
        if jobs is not None:
            session.info["jobs"] = jobs
        try:
            yield session
        except BaseException:
            await session.rollback()
            raise
        if write if commit is None else commit:
            await _finish(session)


@asynccontextmanager
async def short_read(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    """A read beside ``session``'s unit of work, in a session of its own that gives its connection back
    when the block ends: for look-ups before outbound I/O (a turn's tools, its model), so no
    transaction or pool connection is held while the outside world answers.

    A bare session (not opened by a unit of work) has no database to open another from: the block
    then runs in a savepoint of ``session`` itself, so a failure inside cannot spoil its transaction.
    """
    request_unit = _unit_of(session.info, "request_unit")
    if request_unit is not None and request_unit.reader is not None:
        # Authentication's reader is still open: read through it (one connection less), then give it
        # back, so it does not wait on the I/O that follows either.
        try:
            yield request_unit.reader
        finally:
            await request_unit.release_reader()
        return
    database: Database | None = session.info.get("database")
    if database is None:
        async with session.begin_nested():
            yield session
        return
    reader = database.sessionmaker()
    reader.info.update(database=database, jobs=session.info.get("jobs"))
    try:
        yield reader
    finally:
        # A reader whose look-ups were all answered from caches never began: nothing to give back.
        if reader.in_transaction():
            await reader.close()


def _unit_of(info: dict[str, Any], key: str) -> RequestUnit | None:
    """The request unit a session's ``info`` refers to (weakly, see RequestUnit), if it still exists."""
    ref: weakref.ref[RequestUnit] | None = info.get(key)
    return ref() if ref is not None else None


class RequestUnit:
    """A request's unit of work: a reader for authentication and the handler's (writing) session.

    Authentication reads through ``reader`` (never the write lock: SQLite's ``BEGIN IMMEDIATE`` is taken
    only when the handler's session runs its first statement). The reader is given back as soon as the
    handler's session begins; anything authentication changed (a first-seen user, an API key's
    ``last_used_at``) and every hook it registered move to the handler's session and commit with it; a
    row it had to insert at once (a first-seen user) commits before the handler's session begins.

    A read-only request (GET, HEAD, OPTIONS) takes no write lock, so it needs no hand-over: authentication
    and the handler share one session (``shared``), which commits what authentication noted at the end.
    """

    def __init__(self, request: Request) -> None:
        self.database: Database = request.app.state.db
        self.write = request.method not in SAFE_METHODS
        # The app sets its job queue beside its database (the lifespan, or create_app for a handed-in
        # database); the job runner builds on this module, so it is read from the state, not built here.
        # The sessions' info reaches the unit through a weak reference: the unit holds its sessions,
        # so a strong one would make every request a reference cycle, which only the garbage collector
        # frees (its full collections then paused every request in flight; docs/benchmarks.md).
        self.info: dict[str, Any] = {
            "jobs": request.app.state.jobs,
            "database": self.database,
            "request_unit": weakref.ref(self),
        }
        self.reader: AsyncSession | None = None
        self.writer: AsyncSession | None = None
        self.done = False
        # Read-only requests: one session for authentication and the handler (see get_session).
        self.shared: AsyncSession | None = None
        self.claimed = False

    @staticmethod
    def of(request: Request) -> RequestUnit:
        # The dict behind ``request.state``: a missing name costs Starlette's ``State`` an AttributeError.
        state: dict[str, Any] = request.scope.setdefault("state", {})
        unit: RequestUnit | None = state.get("uow")
        if unit is None:
            unit = state["uow"] = RequestUnit(request)
        return unit

    def shared_session(self) -> AsyncSession:
        if self.shared is None:
            self.shared = self.database.sessionmaker()
            self.shared.sync_session.info = self.info
        return self.shared

    async def close_shared(self, *, commit: bool) -> None:
        """End the read-only request's session: commit what authentication noted (and its hooks)."""
        session, self.shared = self.shared, None
        self.done = True
        if session is None:
            return
        work = _has_work(session)
        if not work and not session.in_transaction():
            return  # never began (its reads went through read_rows): nothing to end or give back
        try:
            if commit and work:
                await _finish(session)
            elif not commit:
                await session.rollback()
            # else: it only read; closing ends the read transaction (no commit to pay for)
        finally:
            await session.close()

    def handler_session(self) -> AsyncSession:
        """The handler's session: the shared one of a read-only request, else a writer that takes over
        what authentication read and noted when it runs its first statement."""
        if not self.write:
            self.claimed = True
            return self.shared_session()
        if self.writer is None:
            writer = self.database.write_sessionmaker()
            writer.sync_session.info = self.info
            self.attach_writer(writer)
        return self.writer  # type: ignore[return-value]

    async def complete(self) -> None:
        """The handler returned: commit the request's work (its hooks included)."""
        if not self.write:
            await self.close_shared(commit=True)
            return
        writer = self.writer
        if writer is None:  # no handler session: what authentication noted commits on its own
            await self.release_reader()
            self.done = True
            return
        try:
            await self.release_reader()  # authentication's changes and hooks join this commit
        except BaseException:
            self.done = True
            await writer.close()
            raise
        sync = writer.sync_session
        if not (
            writer.in_transaction()
            or sync.new
            or sync.dirty
            or sync.deleted
            or sync.info.get("before_commit")
        ):
            # Nothing to commit (kit.db.commit_now wrote it, or the handler wrote nothing): the after-commit
            # hooks run; a session that never began holds no connection to give back.
            self.done = True
            for callback in sync.info.pop("after_commit", []):
                await callback()
            return
        try:
            await _finish(writer)
        except BaseException:
            await writer.rollback()
            raise
        finally:
            self.done = True
            await writer.close()

    async def abort(self) -> None:
        """The request failed: nothing of it is kept."""
        if not self.write:
            await self.close_shared(commit=False)
            return
        self.done = True
        reader, self.reader = self.reader, None
        writer, self.writer = self.writer, None
        try:
            if writer is not None:
                await writer.rollback()
                await writer.close()
        finally:
            if reader is not None:
                await reader.close()

    def open_reader(self) -> AsyncSession:
        if not self.write:
            return self.shared_session()
        if self.reader is None:
            self.reader = self.database.sessionmaker()
            self.reader.info.update(jobs=self.info["jobs"], database=self.database)
        return self.reader

    def attach_writer(self, writer: AsyncSession) -> None:
        # Before the writer's first statement or flush, the reader hands over (the listeners below).
        self.writer = writer
        writer.sync_session.info["hand_over_from"] = weakref.ref(self)

    def _adopt_hooks(self, reader: Session) -> None:
        for key in ("before_commit", "after_commit"):
            self.info.setdefault(key, []).extend(reader.info.pop(key, []))

    def hand_over_to(self, writer: Session) -> None:
        if self.writer is not None and self.writer.sync_session is writer:
            self._hand_over_sync()

    def _hand_over_sync(self) -> None:
        if self.reader is None or self.writer is None:
            return
        reader, self.reader = self.reader.sync_session, None
        self._adopt_hooks(reader)
        if _wrote(reader):
            _commit(reader)  # a first-seen user was inserted: keep it, and free the lock it took
        changed = list(reader.new) + list(reader.dirty)
        for obj in changed:
            reader.expunge(obj)
        reader.close()
        self.writer.sync_session.add_all(changed)

    async def release_reader(self) -> None:
        """Give the reader's connection back; its changes go to the writer or commit on their own."""
        if self.reader is None:
            return
        reader, self.reader = self.reader, None
        self._adopt_hooks(reader.sync_session)
        if _wrote(reader.sync_session):
            await reader.run_sync(_commit)
        changed = list(reader.new) + list(reader.dirty)
        for obj in changed:
            reader.expunge(obj)
        if reader.in_transaction():  # else it never read (the identity came from the cache): no connection
            await reader.close()
        if self.writer is not None and not self.done:
            self.writer.add_all(changed)
            return
        if changed or self.info.get("before_commit") or self.info.get("after_commit"):
            # No handler session will commit: authentication's own changes and hooks commit here.
            async with unit_of_work(self.database, info=self.info) as session:
                session.add_all(changed)


# Both run inside a request writer's greenlet before it takes a connection (and SQLite's write lock):
# the reader's connection must be free by then. Registered once for every session (a listener per
# session cost more than the statements of a short request).
@event.listens_for(Session, "do_orm_execute")
def _hand_over_before_statement(state: Any) -> None:
    unit = _unit_of(state.session.info, "hand_over_from")
    if unit is not None:
        unit.hand_over_to(state.session)


@event.listens_for(Session, "before_flush")
def _hand_over_before_flush(session: Session, _context: Any, _instances: Any) -> None:
    unit = _unit_of(session.info, "hand_over_from")
    if unit is not None:
        unit.hand_over_to(session)


def _all_rows(engine: Engine, statement: Executable, parameters: dict[str, Any]) -> list[Row[Any]]:
    with engine.connect() as connection:
        return list(connection.execute(statement, parameters).all())


async def read_first(
    session: AsyncSession, statement: Executable, parameters: dict[str, Any]
) -> Row[Any] | None:
    """The first row of a plain Core ``statement`` read through ``session``'s request (see read_rows)."""
    rows = await read_rows(session, statement, parameters)
    return rows[0] if rows else None


async def read_rows(
    session: AsyncSession, statement: Executable, parameters: dict[str, Any]
) -> list[Row[Any]]:
    """The rows of a plain Core ``statement`` (built once, its values bound) read through ``session``'s
    request.

    A read-only request whose session has not begun (its identity came from the cache) needs no ORM
    session, nor SQLAlchemy's connection, for its statement: the engine's row reader runs it on the
    driver (SQLite: ``kit.sqlite.InlineReader`` on the event loop; PostgreSQL:
    ``kit.postgres.PooledReader`` on asyncpg), with the columns' types applied as SQLAlchemy would. When
    the reader gives way (a busy database, a read past its budget, a broken connection) the rows are
    read on a pooled connection of the same engine in one greenlet hop. The session stays unbegun, so
    the request ends without a transaction to close. Anywhere else (a writer, a session already in a
    transaction or bound to one connection) the statement runs in the session, inside its transaction.
    """
    unit = _unit_of(session.info, "request_unit")
    if (
        unit is not None
        and not unit.write
        and unit.database.reads_beside_sessions
        and not session.in_transaction()
    ):
        return await _read_on_driver(unit.database, statement, parameters)
    result = await session.execute(statement, parameters)
    return list(result.all())


async def read_rows_beside(
    session: AsyncSession, statement: Executable, parameters: dict[str, Any]
) -> list[Row[Any]]:
    """The rows of a plain Core ``statement`` read beside ``session``'s unit of work, as
    :func:`short_read` reads: what is committed, outside ``session``'s transaction, holding no
    connection afterwards. Where the database allows it (sessions bound to the engine), through the
    engine's row reader as :func:`read_rows` does, with no ORM session at all; otherwise in a short read.
    For a write request's look-ups before its engine runs (a conversation turn's session row)."""
    database: Database | None = session.info.get("database")
    if database is not None and database.reads_beside_sessions:
        return await _read_on_driver(database, statement, parameters)
    async with short_read(session) as reader:
        return list((await reader.execute(statement, parameters)).all())


async def commit_now(
    session: AsyncSession,
    statement: Executable,
    parameters: dict[str, Any],
    *,
    then: Sequence[tuple[Executable, dict[str, Any]]] = (),
) -> list[Row[Any]] | None:
    """Run ``statement`` (and the statements of ``then`` after it) and commit the request's unit of
    work now, in one transaction on the driver, when that is all the request writes: the rows the
    statement returns, or None when nothing was written (the caller then writes the usual way in
    ``session``, committed at the request's end). A statement that returns columns must return a row to
    be committed here (an ``UPDATE ... RETURNING`` that finds no row is left to the usual way, which
    sees the same and answers as it always does; nothing of ``then`` is written either).

    It applies to the handler's session of a write request (``DbSession``) that has not begun and holds
    no changes, when authentication noted none and every before-commit hook is a
    :class:`PlainStatement` (the audit event), which is written in the same transaction. SQLite files:
    ``kit.sqlite.InlineWriter`` (the whole transaction on the event loop, never waiting for the write
    lock); PostgreSQL: ``kit.postgres.PooledWriter`` (on asyncpg with a pooled connection: the
    statement and its audit event as one statement, one round trip). After-commit hooks run when the
    request's unit completes, as always; anything the handler writes after this commits then, in a
    transaction of its own, so a caller uses it only for its request's last write (the sessions
    routes: ``commit_at_once``).
    """
    unit = _unit_of(session.info, "request_unit")
    if unit is None or unit.writer is not session or unit.done:
        return None
    database = unit.database
    if (
        database.inline_writer is None and database.pooled_writer is None
    ) or not database.reads_beside_sessions:
        return None
    if unit.reader is not None:
        await unit.release_reader()  # what authentication changed moves to the writer: the usual way
    sync = session.sync_session
    if session.in_transaction() or sync.new or sync.dirty or sync.deleted or _wrote(sync):
        return None
    hooks = sync.info.get("before_commit") or []
    if not all(isinstance(hook, PlainStatement) for hook in hooks):
        return None
    steps = [(statement, parameters), *then, *((hook.statement, hook.values()) for hook in hooks)]
    if database.inline_writer is not None:
        done, rows = database.inline_writer.transaction(steps)
    else:
        assert database.pooled_writer is not None
        done, rows = await database.pooled_writer.transaction(steps)
    if not done:
        return None
    sync.info.pop("before_commit", None)  # written with it
    return rows[0]


async def _read_on_driver(
    database: Database, statement: Executable, parameters: dict[str, Any]
) -> list[Row[Any]]:
    if database.inline_reader is not None:
        done, rows = database.inline_reader.rows(statement, parameters)
    elif database.pooled_reader is not None:
        done, rows = await database.pooled_reader.rows(statement, parameters)
    else:
        done, rows = False, []
    if done:
        return rows
    return await greenlet_spawn(_all_rows, database.engine.sync_engine, statement, parameters)


async def release_reader(request: Request) -> None:
    """Give authentication's read connection back now: call it before a request waits (a turn slot),
    so waiting requests never hold pool connections the running ones need."""
    unit: RequestUnit | None = request.scope.get("state", {}).get("uow")
    if unit is not None:
        await unit.release_reader()


async def end_request_unit(request: Request, *, failed: bool) -> None:
    """Commit (or, when the handler failed, roll back) the request's unit of work, if it opened one.

    The route class (:class:`parley.kit.routing.UnitOfWorkRoute`) calls it when the handler returns,
    before the response is sent (a failed commit is an error response, never a silent loss): the
    handler's session commits with everything authentication noted; on an error nothing is kept.
    ``DbSession``, ``ReadSession`` and the identity dependencies reach their sessions through
    ``RequestUnit.of(request)``, so a request opens at most one unit however many sessions it uses.
    """
    unit: RequestUnit | None = request.scope.get("state", {}).get("uow")
    if unit is None or unit.done:
        return
    if failed:
        await unit.abort()
    else:
        await unit.complete()


async def get_read_session(request: Request) -> AsyncSession:
    """A short read session for authentication; given back once the handler's session begins."""
    return RequestUnit.of(request).open_reader()


async def get_session(request: Request) -> AsyncSession:
    """The handler's session, committed by the request's unit of work when the handler returns."""
    session = RequestUnit.of(request).handler_session()
    request.state.db_session = session
    return session


DbSession = Annotated[AsyncSession, Depends(get_session)]
ReadSession = Annotated[AsyncSession, Depends(get_read_session)]
