"""Stored tokens: refresh (on demand, when expiring, in the background, concurrently), disconnect."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.integrations.models import IntegrationClient, IntegrationConnection, OAuthState
from parley.integrations.service import access_token_for
from parley.integrations.tasks import REFRESH_JOB
from parley.kit.errors import Conflict, UpstreamError
from tests.integrations.conftest import Provider, admin_headers
from tests.integrations.helpers import connect_fully, put_client


async def connected(client: httpx.AsyncClient, provider: Provider) -> tuple[dict[str, str], str]:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    out = await connect_fully(client, headers)
    return headers, str(out["connection_id"])


async def test_forced_refresh_rotates_tokens(client: httpx.AsyncClient, provider: Provider) -> None:
    headers, connection_id = await connected(client, provider)
    before = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    first_refresh = next(iter(provider.stub.refresh_tokens))
    response = await client.post(f"/api/integrations/connections/{connection_id}/refresh", headers=headers)
    assert response.status_code == 200, response.text
    after = response.json()
    assert after["last_refreshed_at"] is not None
    assert after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]
    [grant] = provider.stub.refreshes()
    assert grant["refresh_token"] == first_refresh
    # Twice in a row works: the second refresh uses the rotated token.
    again = await client.post(f"/api/integrations/connections/{connection_id}/refresh", headers=headers)
    assert again.status_code == 200
    assert provider.stub.refreshes()[1]["refresh_token"] != first_refresh


async def test_access_token_for_refreshes_only_when_expiring(
    client: httpx.AsyncClient, provider: Provider, app: Any
) -> None:
    provider.stub.access_ttl = 120
    _, connection_id = await connected(client, provider)
    db, settings = app.state.db, app.state.settings
    fresh = await access_token_for(db, settings, connection_id, margin=30)
    assert fresh.refreshed is False and provider.stub.refreshes() == []
    expiring = await access_token_for(db, settings, connection_id, margin=300)
    assert expiring.refreshed is True and expiring.token != fresh.token
    assert len(provider.stub.refreshes()) == 1
    async with httpx.AsyncClient() as http:
        me = await http.get(f"{provider.url}/userinfo", headers={"Authorization": f"Bearer {expiring.token}"})
    assert me.status_code == 200


async def test_refused_refresh_marks_the_connection(
    client: httpx.AsyncClient, provider: Provider, app: Any
) -> None:
    headers, connection_id = await connected(client, provider)
    for value in provider.stub.refresh_tokens.values():
        value["active"] = False  # revoked at the provider by someone else
    response = await client.post(f"/api/integrations/connections/{connection_id}/refresh", headers=headers)
    assert response.status_code == 502
    assert "invalid_grant" in response.json()["detail"]
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["status"] == "refresh_failed" and "invalid_grant" in shown["last_error"]
    with pytest.raises(Conflict):
        await access_token_for(app.state.db, app.state.settings, connection_id)
    again = await client.post(f"/api/integrations/connections/{connection_id}/refresh", headers=headers)
    assert again.status_code == 409 and "connected again" in again.json()["detail"]
    # Connecting again repairs it.
    await connect_fully(client, headers)
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["status"] == "active" and shown["last_error"] is None


async def test_transient_refresh_failure_keeps_the_connection(
    client: httpx.AsyncClient, provider: Provider, app: Any
) -> None:
    headers, connection_id = await connected(client, provider)
    provider.stub.token_failure = (503, "maintenance")
    with pytest.raises(UpstreamError):
        await access_token_for(app.state.db, app.state.settings, connection_id, force=True)
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["status"] == "active"


async def test_without_refresh_token_an_expired_token_is_409(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    provider.stub.issue_refresh_tokens = False
    headers, connection_id = await connected(client, provider)
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["refresh_token"] is None
    response = await client.post(f"/api/integrations/connections/{connection_id}/refresh", headers=headers)
    assert response.status_code == 409 and "no refresh token" in response.json()["detail"]


async def test_background_job_refreshes_tokens_about_to_expire(
    client: httpx.AsyncClient, provider: Provider, app: Any, settings: Any
) -> None:
    provider.stub.access_ttl = 60  # inside the default margin of 300 s
    headers, soon = await connected(client, provider)
    soon_refresh_tokens = list(provider.stub.refresh_tokens)
    provider.stub.access_ttl = 3600
    other_headers = await admin_headers(client)
    await put_client(client, other_headers, provider)
    later = (await connect_fully(client, other_headers))["connection_id"]
    app.state.jobs.enqueue(REFRESH_JOB, {})
    await app.state.jobs.drain()
    refreshed = [g["refresh_token"] for g in provider.stub.refreshes()]
    assert refreshed == soon_refresh_tokens
    soon_row = (await client.get(f"/api/integrations/connections/{soon}", headers=headers)).json()
    assert soon_row["last_refreshed_at"] is not None
    later_row = (await client.get(f"/api/integrations/connections/{later}", headers=other_headers)).json()
    assert later_row["last_refreshed_at"] is None


async def test_disconnect_revokes_at_the_provider(client: httpx.AsyncClient, provider: Provider) -> None:
    headers, connection_id = await connected(client, provider)
    refresh_token = next(iter(provider.stub.refresh_tokens))
    response = await client.delete(f"/api/integrations/connections/{connection_id}", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "id": connection_id,
        "deleted": True,
        "revoked": True,
        "revocation_detail": None,
    }
    assert provider.stub.revoked == [refresh_token]
    assert (
        await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)
    ).status_code == 404
    # With the connection gone, the client may be removed.
    assert (await client.delete("/api/integrations/acme/client", headers=headers)).status_code == 200


async def test_disconnect_without_revocation_endpoint(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider, revocation_url=None)
    body = provider.client_body()
    body.pop("revocation_url")
    await client.put("/api/integrations/acme/client", json=body, headers=headers)
    connection_id = (await connect_fully(client, headers))["connection_id"]
    response = await client.delete(f"/api/integrations/connections/{connection_id}", headers=headers)
    assert response.status_code == 200
    assert response.json()["revoked"] is False
    assert "no revocation endpoint" in response.json()["revocation_detail"]
    assert provider.stub.revoked == []


async def test_client_with_a_connection_cannot_be_removed(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers, connection_id = await connected(client, provider)
    response = await client.delete("/api/integrations/acme/client", headers=headers)
    assert response.status_code == 409 and connection_id in response.json()["detail"]


async def test_connections_are_scoped_to_the_organization(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    _, connection_id = await connected(client, provider)
    other = await admin_headers(client)
    for method, path in [
        ("GET", f"/api/integrations/connections/{connection_id}"),
        ("POST", f"/api/integrations/connections/{connection_id}/refresh"),
        ("DELETE", f"/api/integrations/connections/{connection_id}"),
    ]:
        response = await client.request(method, path, headers=other)
        assert response.status_code == 404, (method, path)
    assert (await client.get("/api/integrations/connections", headers=other)).json()["items"] == []


async def test_deleting_the_organization_removes_its_integrations(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession
) -> None:
    headers, _ = await connected(client, provider)
    org_id = headers["X-Organization-Id"]
    from tests.organizations.test_router import ALICE

    response = await client.delete(
        f"/api/organizations/{org_id}", headers={"Authorization": f"Bearer {ALICE}"}
    )
    assert response.status_code == 200, response.text
    for model in (IntegrationClient, IntegrationConnection, OAuthState):
        count = await db_session.scalar(
            select(func.count()).select_from(model).where(model.organization_id == org_id)
        )
        assert count == 0, model.__name__
