"""A migrated database per test module of the console, on SQLite and on PostgreSQL (copies of a template)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import migrated, pg


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path_factory.mktemp("console_db") / "parley.db")
        return
    name, url = migrated.postgres("parley_console_more")
    try:
        yield url
    finally:
        pg.drop_database(name)
