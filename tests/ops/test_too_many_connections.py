"""PostgreSQL refusing more connections ("too many connections", SQLSTATE 53300, what a server at its
``max_connections`` answers): every request that needs a new connection is a 503 with Retry-After,
never a 500 — the reads and writes that go straight to the driver (``kit.postgres``'s pooled reader
and writer) included — and everything works again once connections are free."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests import migrated, pg
from tests.conftest import auth, committed_app
from tests.organizations.test_router import ALICE, create_org

pytestmark = pytest.mark.postgres

LOOP = {
    "language": "en",
    "variables": {},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "Go on.", "next": "tell"},
        {"id": "tell", "type": "say", "text": "You said {{ q }}.", "next": "ask"},
    ],
}


@pytest.fixture
def limited() -> Iterator[tuple[str, str, str]]:
    """A migrated database and a role that may hold at most two connections: (database, role, URL)."""
    name, url = migrated.postgres("parley_ops_limited")
    role = f"parley_limited_{uuid.uuid4().hex[:8]}"

    async def admin(*statements: str) -> None:
        connection = await asyncpg.connect(pg.ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}")
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(
        admin(
            f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 2',
            f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"',
            f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"',
        )
    )
    try:
        yield name, role, url.replace("postgres@", f"{role}@", 1)
    finally:
        pg.drop_database(name)  # its grants go with it; then the role owns nothing
        asyncio.run(pg._admin_execute(f'DROP ROLE IF EXISTS "{role}"'))


@pytest.fixture
async def platform(
    tmp_path: Path, limited: tuple[str, str, str]
) -> AsyncIterator[tuple[httpx.AsyncClient, Any, dict[str, str]]]:
    _, _, url = limited
    async with committed_app(tmp_path, url) as (client, database, _app):
        org = str((await create_org(client))["id"])
        yield client, database, auth(ALICE, org)


async def test_a_server_refusing_connections_answers_503_everywhere_then_recovers(
    platform: tuple[httpx.AsyncClient, Any, dict[str, str]], limited: tuple[str, str, str]
) -> None:
    client, database, headers = platform
    name, role, _ = limited
    key = (await client.post("/api/api-keys", json={"name": "k"}, headers=headers)).json()
    flow = (await client.post("/api/flows", json={"name": "f", "definition": LOOP}, headers=headers)).json()
    assert (await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)).status_code == 200
    session_id = (await client.post("/api/sessions", json={"flow_id": flow["id"]}, headers=headers)).json()[
        "id"
    ]
    for word in ("one", "two"):  # the turn's statements are prepared for the driver by now
        turn = await client.post(f"/api/sessions/{session_id}/messages", json={"text": word}, headers=headers)
        assert turn.status_code == 200, turn.text

    async def requests() -> list[httpx.Response]:
        return [
            await client.get(f"/api/api-keys/{key['id']}", headers=headers),
            await client.get("/api/calls", headers=headers),
            await client.post("/api/api-keys", json={"name": "k2"}, headers=headers),
            await client.post("/api/sessions", json={"flow_id": flow["id"]}, headers=headers),
            await client.post(
                f"/api/sessions/{session_id}/messages", json={"text": "three"}, headers=headers
            ),
        ]

    await database.engine.dispose()  # every request now needs a new connection
    dsn = pg.ADMIN_DSN.rsplit("/", 1)[0].replace("postgres@", f"{role}@", 1) + f"/{name}"
    held = [await asyncpg.connect(dsn) for _ in range(2)]  # the role's limit: the server refuses more
    try:
        refused = await requests()
    finally:
        for connection in held:
            await connection.close()
    for response in refused:
        assert response.status_code == 503, (response.request.url, response.text)
        assert response.headers["Retry-After"] == "2"
        assert response.json()["code"] == "service_unavailable"

    answered = await requests()
    assert [r.status_code for r in answered] == [200] * 5, [r.text for r in answered]
    assert "You said three." in answered[-1].json()["reply"]
