"""The same migrations run up, down and up again on SQLite and PostgreSQL, matching the models."""

from __future__ import annotations

import asyncio

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from parley.kit.migrate import current, downgrade, is_current, upgrade
from parley.models import Base
from tests import pg


@pytest.fixture(params=["sqlite", pg.ENGINE_NAME])
def fresh_url(request: pytest.FixtureRequest, tmp_path: object) -> object:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/m.db"
        return
    name, url = pg.create_database("parley_migrate")
    yield url
    pg.drop_database(name)


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    # The same filter as migrations/env.py: FTS5 tables and the tsvector index are not modelled.
    return not (name or "").startswith(("knowledge_chunks_fts", "ix_knowledge_chunks_tsv"))


def _diff(url: str) -> list[object]:
    async def run() -> list[object]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda c: compare_metadata(
                        MigrationContext.configure(c, opts={"include_name": include_name}), Base.metadata
                    )
                )
        finally:
            await engine.dispose()

    return asyncio.run(run())


@pytest.mark.slow  # every migration up, down and up again: 7 to 10 s
def test_upgrade_downgrade_upgrade(fresh_url: str) -> None:
    assert not is_current(fresh_url)
    upgrade(fresh_url)
    assert is_current(fresh_url)
    assert "(head)" in current(fresh_url)
    assert _diff(fresh_url) == []
    downgrade(fresh_url, "base")
    assert not is_current(fresh_url)
    upgrade(fresh_url)
    assert _diff(fresh_url) == []
