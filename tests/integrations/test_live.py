"""The flow over real HTTP end to end: the platform under uvicorn with its own database, the local
OAuth2 server, and a browser (httpx) going back and forth between them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from parley.app import create_app
from parley.config import Settings
from parley.integrations.models import IntegrationConnection
from parley.integrations.service import access_token_for
from parley.kit.db import Database, utcnow
from tests.conftest import JWT_SECRET, auth, make_token
from tests.integrations.conftest import Provider
from tests.integrations.helpers import browse, query_of
from tests.live import free_port, serve_in_thread

OWNER = make_token("integrations-live-owner", ttl=3600 * 4)


@dataclass
class Live:
    url: str
    settings: Settings
    http: httpx.AsyncClient
    headers: dict[str, str]


@pytest.fixture
async def live(db_url: str, tmp_path: Path, provider: Provider) -> AsyncIterator[Live]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = Settings(
        data_dir=tmp_path / "live",
        database_url=db_url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        outbound_allowlist=["127.0.0.1"],
        public_url=base,
        rate_limit_per_minute=0,
        log_json=False,
        log_level="WARNING",
    )
    app = create_app(settings)
    with serve_in_thread(app, port) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            org = await http.post("/api/organizations", json={"name": "Live OAuth"}, headers=auth(OWNER))
            assert org.status_code == 200, org.text
            headers = auth(OWNER, org.json()["id"])
            client = await http.put(
                "/api/integrations/acme/client", json=provider.client_body(), headers=headers
            )
            assert client.status_code == 200, client.text
            try:
                yield Live(url, app.state.settings, http, headers)
            finally:
                # The database outlives this test: leave no connection behind for other tests' jobs.
                await http.delete(f"/api/organizations/{headers['X-Organization-Id']}", headers=auth(OWNER))


async def _connect(live: Live) -> tuple[str, dict[str, object]]:
    started = await live.http.post("/api/integrations/acme/connect", json={}, headers=live.headers)
    assert started.status_code == 200, started.text
    assert (
        query_of(started.json()["authorization_url"])["redirect_uri"]
        == f"{live.url}/api/integrations/oauth/callback"
    )
    callback_path = await browse(started.json()["authorization_url"], public_url=live.url)
    response = await live.http.get(callback_path)
    assert response.status_code == 200, response.text
    return callback_path, response.json()


async def test_full_flow_over_http(live: Live, provider: Provider) -> None:
    callback_path, out = await _connect(live)
    assert out["status"] == "connected"
    reused = await live.http.get(callback_path)
    assert reused.status_code == 400 and "already used" in reused.json()["detail"]
    listed = (await live.http.get("/api/integrations/connections", headers=live.headers)).json()["items"]
    assert [c["id"] for c in listed] == [out["connection_id"]]
    assert [g["grant_type"] for g in provider.stub.grants] == ["authorization_code"]


async def test_concurrent_refresh_requests_never_reuse_a_rotated_refresh_token(
    live: Live, provider: Provider
) -> None:
    _, out = await _connect(live)
    provider.stub.refresh_delay = 0.2
    path = f"/api/integrations/connections/{out['connection_id']}/refresh"
    responses = await asyncio.gather(*(live.http.post(path, headers=live.headers) for _ in range(3)))
    assert [r.status_code for r in responses] == [200, 200, 200], [r.text for r in responses]
    used = [g["refresh_token"] for g in provider.stub.refreshes()]
    assert len(used) == 3 and len(set(used)) == 3  # each refresh presented the then-current token
    shown = (
        await live.http.get(f"/api/integrations/connections/{out['connection_id']}", headers=live.headers)
    ).json()
    assert shown["status"] == "active"


async def test_concurrent_access_token_for_refreshes_once(
    live: Live, provider: Provider, db_url: str
) -> None:
    _, out = await _connect(live)
    connection_id = str(out["connection_id"])
    db = Database.from_url(db_url, pool_size=8)
    try:
        async with db.write_sessionmaker() as session:
            await session.execute(
                update(IntegrationConnection)
                .where(IntegrationConnection.id == connection_id)
                .values(expires_at=utcnow() - timedelta(seconds=5))
            )
            await session.commit()
        provider.stub.refresh_delay = 0.2
        tokens = await asyncio.gather(*(access_token_for(db, live.settings, connection_id) for _ in range(5)))
    finally:
        await db.dispose()
    assert len(provider.stub.refreshes()) == 1
    assert len({t.token for t in tokens}) == 1 and sum(t.refreshed for t in tokens) == 1


async def test_racing_callbacks_with_one_state_connect_once(live: Live, provider: Provider) -> None:
    started = await live.http.post("/api/integrations/acme/connect", json={}, headers=live.headers)
    callback_path = await browse(started.json()["authorization_url"], public_url=live.url)
    responses = await asyncio.gather(*(live.http.get(callback_path) for _ in range(3)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses[0] == 200 and statuses.count(200) == 1, [r.text for r in responses]
    # the state is claimed before the exchange: the provider sees the code once, the others get 400
    assert statuses[1:] == [400, 400], [r.text for r in responses]
    assert all("already used" in r.json()["detail"] for r in responses if r.status_code == 400)
    assert [g["grant_type"] for g in provider.stub.grants] == ["authorization_code"]
    listed = (await live.http.get("/api/integrations/connections", headers=live.headers)).json()["items"]
    assert len(listed) == 1
