"""A migrated database per test module of the console, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.kit.migrate import upgrade
from tests import pg


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('console_db') / 'parley.db'}"
        upgrade(url)
        yield url
        return
    name, url = pg.create_database("parley_console_more")
    try:
        upgrade(url)
        yield url
    finally:
        pg.drop_database(name)
