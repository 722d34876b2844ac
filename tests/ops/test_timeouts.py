"""Database time-outs come from settings and turn into "unavailable, retry" (503), not bugs (500)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError

from parley.config import Settings
from parley.kit.db import Database
from parley.kit.errors import is_unavailable
from tests import pg

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    name, url = pg.create_database("parley_ops_timeouts")
    try:
        yield url
    finally:
        pg.drop_database(name)


async def test_statement_timeout_is_enforced_and_retryable(pg_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url=pg_url, db_statement_timeout=0.5)
    database = Database.from_settings(settings)
    try:
        async with database.engine.connect() as conn:
            assert await conn.scalar(text("SHOW statement_timeout")) == "500ms"
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(text("SELECT pg_sleep(3)"))
        assert is_unavailable(caught.value)
    finally:
        await database.dispose()


async def test_constraint_violations_are_not_unavailability(pg_url: str, tmp_path: Path) -> None:
    database = Database.from_settings(Settings(data_dir=tmp_path, database_url=pg_url))
    try:
        async with database.engine.connect() as conn:
            await conn.execute(text("CREATE TEMPORARY TABLE t (id int PRIMARY KEY)"))
            await conn.execute(text("INSERT INTO t VALUES (1)"))
            with pytest.raises(IntegrityError) as caught:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        assert not is_unavailable(caught.value)
    finally:
        await database.dispose()


async def test_sqlite_busy_timeout_from_settings(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'busy.db'}"
    database = Database.from_settings(Settings(data_dir=tmp_path, database_url=url, db_busy_timeout=2.5))
    try:
        async with database.engine.connect() as conn:
            assert await conn.scalar(text("PRAGMA busy_timeout")) == 2500
    finally:
        await database.dispose()
