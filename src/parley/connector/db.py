"""Engines and migrations of the connector's database.

The async SQLAlchemy engine serves the write side (import, demo, keys); the request path reads
through :mod:`parley.connector.repository` without the ORM. SQLite runs in WAL mode so readers never
wait for an import in progress.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from parley.connector.config import ConnectorSettings

SQLITE_BUSY_TIMEOUT_MS = 5000


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def create_engine(settings: ConnectorSettings) -> AsyncEngine:
    url = settings.resolved_database_url
    if settings.is_sqlite:
        settings.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
        return engine
    return create_async_engine(url, pool_size=5, pool_pre_ping=True)


@asynccontextmanager
async def engine_scope(settings: ConnectorSettings) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(settings)
    try:
        yield engine
    finally:
        await engine.dispose()


def alembic_config(settings: ConnectorSettings) -> Config:
    config = Config()
    config.set_main_option("script_location", "parley.connector:migrations")
    # ConfigParser interpolation: a literal % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", settings.resolved_database_url.replace("%", "%%"))
    return config


def upgrade(settings: ConnectorSettings) -> None:
    """Bring the database to the latest revision; a no-op when it is already there.

    Synchronous: Alembic's env runs its own event loop, so call it outside a running loop (or in a
    worker thread).
    """
    if settings.is_sqlite:
        path = settings.sqlite_path
        path.parent.mkdir(parents=True, exist_ok=True)
        # WAL is a property of the file; set once so every later reader (sqlite3 too) benefits.
        with closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
    command.upgrade(alembic_config(settings), "head")


async def upgrade_async(settings: ConnectorSettings) -> None:
    await asyncio.to_thread(upgrade, settings)
