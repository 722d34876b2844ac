"""A real platform server (uvicorn in a thread) on a fresh database, SQLite and PostgreSQL, for attacks
that need concurrency or the real HTTP stack (the savepoint fixture of tests/conftest.py serialises)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth, make_token
from tests.live import serve_in_thread


@dataclass(frozen=True)
class Live:
    url: str
    settings: Settings
    data_dir: Path


def live_settings(data_dir: Path, database_url: str, **overrides: object) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        outbound_allowlist=["127.0.0.1"],
        log_json=False,
        **overrides,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def fresh_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path_factory.mktemp("security") / "parley.db")
        return
    name, url = migrated.postgres("parley_security")
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture(scope="module")
def live(fresh_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data_dir = tmp_path_factory.mktemp("live-data")
    settings = live_settings(data_dir, fresh_db)
    with serve_in_thread(create_app(settings)) as url:
        yield Live(url, settings, data_dir)


def new_org(http: httpx.Client, user: str, name: str) -> dict[str, str]:
    """Create an organization for ``user``; answer the headers that act in it."""
    token = make_token(user)
    response = http.post("/api/organizations", json={"name": name}, headers=auth(token))
    assert response.status_code == 200, response.text
    return auth(token, str(response.json()["id"]))
