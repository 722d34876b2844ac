"""Database: declarative base, engine set-up for SQLite and PostgreSQL, and the request session.

One transaction per request: the ``get_session`` dependency opens it and commits after the handler
returns (before the response is sent, so a failed commit is an error response, never a silent loss).
Services only ``flush``. Callbacks registered with :func:`after_commit` (job enqueues) run after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from sqlalchemy import DateTime, MetaData, String, event
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

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
    # pysqlite's own transaction handling breaks SAVEPOINT; let SQLAlchemy emit BEGIN itself.
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    # Writing requests take the write lock up front (BEGIN IMMEDIATE): a deferred transaction that
    # upgrades to a writer under concurrency fails with SQLITE_BUSY instead of waiting.
    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(f"BEGIN {conn.get_execution_options().get('sqlite_begin', 'DEFERRED')}")


@dataclass(frozen=True)
class Timeouts:
    """How long the database may take, so an outage fails fast (503) instead of hanging requests.

    ``connect``: opening a PostgreSQL connection. ``statement``: one statement, enforced by the server
    (``statement_timeout``) and, a little later, by the client (asyncpg's ``command_timeout``, which
    also covers a server that stopped answering). ``busy``: on SQLite, how long a writer waits for
    the write lock. ``recycle``: pooled connections older than this are replaced (load balancers and failovers drop
    idle connections silently). Every checkout is pinged first (``pool_pre_ping``), so connections
    broken by a database restart are replaced instead of failing the request.
    """

    connect: float = 5.0
    statement: float = 30.0
    busy: float = 10.0
    recycle: float = 1800.0


def create_engine(
    url: str, *, pool_size: int = 20, pool_timeout: float = 10.0, timeouts: Timeouts | None = None
) -> AsyncEngine:
    timeouts = timeouts or Timeouts()
    if url.startswith("sqlite"):
        engine = create_async_engine(url, pool_size=pool_size, max_overflow=0, pool_timeout=pool_timeout)
        _configure_sqlite(engine, timeouts.busy)
        return engine
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size // 2,
        pool_timeout=pool_timeout,
        pool_pre_ping=True,
        pool_recycle=timeouts.recycle,
        connect_args={
            "timeout": timeouts.connect,
            "command_timeout": timeouts.statement + 5,
            "server_settings": {"statement_timeout": str(int(timeouts.statement * 1000))},
        },
    )


@dataclass
class Database:
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    write_sessionmaker: async_sessionmaker[AsyncSession]

    @classmethod
    def from_url(
        cls, url: str, *, pool_size: int = 20, pool_timeout: float = 10.0, timeouts: Timeouts | None = None
    ) -> Database:
        engine = create_engine(url, pool_size=pool_size, pool_timeout=pool_timeout, timeouts=timeouts)
        writer = engine.execution_options(sqlite_begin="IMMEDIATE") if url.startswith("sqlite") else engine
        return cls(
            engine,
            async_sessionmaker(engine, expire_on_commit=False, autoflush=False),
            async_sessionmaker(writer, expire_on_commit=False, autoflush=False),
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

    async def dispose(self) -> None:
        await self.engine.dispose()


AfterCommit = Callable[[], Awaitable[None]]
BeforeCommit = Callable[[AsyncSession], Awaitable[None]]


def before_commit(session: AsyncSession, hook: BeforeCommit) -> None:
    """Run ``hook`` inside the request's transaction, just before it commits (e.g. the audit event)."""
    session.info.setdefault("before_commit", []).append(hook)


def after_commit(session: AsyncSession, callback: AfterCommit) -> None:
    """Run ``callback`` once the request's transaction has committed (e.g. to enqueue a job)."""
    session.info.setdefault("after_commit", []).append(callback)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _jobs_of(request: Request) -> Any:
    from parley.kit.jobs import runner_for  # the job runner builds on this module

    return runner_for(request.app.state)


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    database: Database = request.app.state.db
    maker = database.sessionmaker if request.method in SAFE_METHODS else database.write_sessionmaker
    async with maker() as session:
        request.state.db_session = session
        # Services that enqueue work after the commit (call analysis, ingestion) find the runner here.
        session.info["jobs"] = _jobs_of(request)
        try:
            yield session
        except BaseException:
            await session.rollback()
            raise
        for hook in session.info.pop("before_commit", []):
            await hook(session)
        await session.commit()
        for callback in session.info.pop("after_commit", []):
            await callback()


# scope="function": the transaction commits when the handler returns, before the response is sent.
DbSession = Annotated[AsyncSession, Depends(get_session, scope="function")]
