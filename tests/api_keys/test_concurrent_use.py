"""A GET that notes an API key's use while another connection commits: on SQLite it must still answer.

A read-only request reads the key (its read snapshot begins), and commits the key's ``last_used_at`` at
the end. When another connection committed in between, SQLite refuses that write for a stale snapshot
(``SQLITE_BUSY_SNAPSHOT``, whatever the busy time-out); the request used to answer 503. Real parts: a
migrated SQLite file, the platform app, and a second writer through Python's own ``sqlite3``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.dependencies import on_authenticated
from parley.auth.principal import Principal
from tests import migrated
from tests.conftest import auth, committed_app
from tests.organizations.test_router import ALICE, create_org


@pytest.fixture
def sqlite_file(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "parley.db"
    return migrated.sqlite_url(path), path


@pytest.fixture
async def platform(tmp_path: Path, sqlite_file: tuple[str, Path]) -> AsyncIterator[tuple[Any, Path]]:
    url, path = sqlite_file
    async with committed_app(tmp_path, url) as (_client, _database, app):
        yield app, path


async def test_a_get_noting_a_key_use_answers_when_another_connection_committed_meanwhile(
    platform: tuple[Any, Path],
) -> None:
    app, path = platform
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as client:
        org = await create_org(client)
        created = await client.post(
            "/api/api-keys", json={"name": "sync", "scopes": ["admin"]}, headers=auth(ALICE, str(org["id"]))
        )
        assert created.status_code == 200, created.text
        secret = created.json()["secret"]
        commits: list[str] = []

        def commit_elsewhere(_request: Request, _session: AsyncSession, principal: Principal) -> None:
            # After the key was read (the GET's snapshot began), before its use is committed.
            if principal.kind == "api_key":
                other = sqlite3.connect(path, timeout=5)
                try:
                    other.execute("UPDATE organizations SET name = name || '.' WHERE id = ?", (org["id"],))
                    other.commit()
                finally:
                    other.close()
                commits.append(principal.id)

        on_authenticated(app, commit_elsewhere)
        listed = await client.get("/api/api-keys", headers={"Authorization": f"Bearer {secret}"})
        assert listed.status_code == 200, listed.text
        assert commits, "the other connection did not commit during the request"
        [key] = listed.json()["items"]
        assert key["last_used_at"] is not None  # the use was noted, not dropped
        again = await client.get(f"/api/api-keys/{key['id']}", headers=auth(ALICE, str(org["id"])))
        assert again.json()["last_used_at"] is not None  # committed
