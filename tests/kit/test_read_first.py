"""A GET that only answers one row reads it without an ORM session (``kit.db.read_first``).

Real parts: a migrated database (SQLite file or a fresh PostgreSQL database) with committed rows, the
platform app on its own ``Database`` (not the tests' shared outer transaction, which the fast path must
never read beside), requests through ASGI. What is checked: the answer is the row the API created, the
request runs no ORM statement and checks out at most one connection (none on SQLite, whose inline
reader has its own), which is back in the pool when it ends, and another organization's id is still a
404.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

from parley.kit import sqlite as sqlite_kit
from parley.kit.db import Database
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org


class Counts:
    """ORM statements (any session) and pool check-outs of ``database`` while a block runs."""

    def __init__(self, database: Database) -> None:
        self.orm_statements = 0
        self.checkouts = 0
        self.pool = database.engine.sync_engine.pool

    def _orm(self, _state: Any) -> None:
        self.orm_statements += 1

    def _checkout(self, *_args: Any) -> None:
        self.checkouts += 1

    def __enter__(self) -> Counts:
        event.listen(Session, "do_orm_execute", self._orm)
        event.listen(self.pool, "checkout", self._checkout)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(Session, "do_orm_execute", self._orm)
        event.remove(self.pool, "checkout", self._checkout)


async def test_a_get_by_id_reads_its_row_without_a_session(
    committed_platform: tuple[httpx.AsyncClient, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's inline reader hands a read still running after 2 ms to a pooled connection (right, and
    # tested in test_sqlite_one_hop.py); on a loaded machine a preempted read passes that budget, which
    # is not what this test looks at.
    monkeypatch.setattr(sqlite_kit, "INLINE_BUDGET_S", 60.0)
    client, database = committed_platform
    org = str((await create_org(client))["id"])
    headers = auth(ALICE, org)
    created = await client.post("/api/api-keys", json={"name": "reader", "scopes": ["read"]}, headers=headers)
    assert created.status_code == 200, created.text
    expected = {name: value for name, value in created.json().items() if name != "secret"}
    path = f"/api/api-keys/{expected['id']}"
    assert (await client.get(path, headers=headers)).status_code == 200  # the identity is cached now

    with Counts(database) as counts:
        response = await client.get(path, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == expected
    # SQLite reads it on the inline reader's own connection (kit.sqlite.InlineReader), PostgreSQL on one
    # pooled connection.
    sqlite = database.engine.dialect.name == "sqlite"
    assert (counts.orm_statements, counts.checkouts) == (0, 0 if sqlite else 1)
    assert database.engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_another_organizations_id_is_still_not_found(
    committed_platform: tuple[httpx.AsyncClient, Database],
) -> None:
    client, _database = committed_platform
    mine = str((await create_org(client, name="Mine"))["id"])
    theirs = str((await create_org(client, name="Theirs"))["id"])
    created = await client.post(
        "/api/api-keys", json={"name": "theirs", "scopes": ["read"]}, headers=auth(ALICE, theirs)
    )
    assert created.status_code == 200, created.text
    key_id = created.json()["id"]
    assert (await client.get(f"/api/api-keys/{key_id}", headers=auth(ALICE, theirs))).status_code == 200

    response = await client.get(f"/api/api-keys/{key_id}", headers=auth(ALICE, mine))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
