"""The whole authorization code flow against a local OAuth2 server: connect, browser, callback."""

from __future__ import annotations

import base64
import hashlib
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.models import AuditEvent
from parley.integrations.models import IntegrationConnection, OAuthState
from parley.kit.crypto import sha256_hex
from parley.kit.db import utcnow
from tests.conftest import auth
from tests.integrations.conftest import Provider, admin_headers
from tests.integrations.helpers import CALLBACK, browse, connect, connect_fully, put_client, query_of
from tests.organizations.test_router import BOB


async def test_connect_returns_an_authorization_url_with_state_and_pkce(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    started = await connect(client, headers)
    assert set(started) == {"authorization_url", "state", "expires_at", "redirect_uri"}
    assert started["authorization_url"].startswith(f"{provider.url}/authorize?")
    query = query_of(started["authorization_url"])
    assert query["response_type"] == "code"
    assert query["client_id"] == "parley-client"
    assert query["redirect_uri"] == "http://parley.test/api/integrations/oauth/callback"
    assert query["state"] == started["state"]
    assert query["scope"] == "calendar.read offline_access"
    assert query["code_challenge_method"] == "S256"
    assert len(query["code_challenge"]) == 43  # base64url of a SHA-256 digest, no padding
    assert len(started["state"]) >= 43

    # Stored hashed, bound to user, organization and provider; the verifier sealed.
    row = await db_session.scalar(
        select(OAuthState).where(OAuthState.state_hash == sha256_hex(started["state"]))
    )
    assert row is not None
    assert row.organization_id == headers["X-Organization-Id"] and row.provider == "acme"
    assert row.user_id.startswith("usr_") and row.consumed_at is None
    assert started["state"] not in row.code_verifier and row.code_verifier.startswith("v1:")
    assert (row.expires_at - utcnow()) > timedelta(minutes=9)
    assert (row.expires_at - utcnow()) <= timedelta(minutes=10)


async def test_connect_body_is_optional_and_scopes_can_be_narrowed(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    bare = await client.post("/api/integrations/acme/connect", headers=headers)
    assert bare.status_code == 200, bare.text
    narrowed = await connect(client, headers, body={"scopes": ["calendar.read"]})
    assert query_of(narrowed["authorization_url"])["scope"] == "calendar.read"
    form = await client.post(
        "/api/integrations/acme/connect",
        data={"return_to": "/done"},
        files={"f": ("f.txt", b"x")},
        headers=headers,
    )
    assert form.status_code == 200, form.text


async def test_google_preset_authorization_url(client: httpx.AsyncClient) -> None:
    headers = await admin_headers(client)
    await client.put(
        "/api/integrations/google/client",
        json={"client_id": "123.apps.googleusercontent.com", "client_secret": "GOCSPX-abcdefgh"},
        headers=headers,
    )
    started = await connect(client, headers, "google")
    assert started["authorization_url"].startswith("https://accounts.google.com/o/oauth2/v2/auth?")
    query = query_of(started["authorization_url"])
    assert query["access_type"] == "offline" and query["prompt"] == "consent"
    assert query["scope"] == "openid email profile"


@pytest.mark.parametrize(
    ("return_to", "status"),
    [
        ("/settings/integrations", 200),
        ("http://parley.test/after", 200),
        ("https://app.example.com/done?x=1", 200),
        ("https://evil.example.com/", 400),
        ("//evil.example.com/path", 400),
        ("javascript:alert(1)", 400),
        ("https://app.example.com.evil.net/", 400),
        ("http://app.example.com/", 400),  # the allowed origin is https
    ],
)
async def test_return_to_must_be_an_allowed_target(
    client: httpx.AsyncClient, provider: Provider, return_to: str, status: int
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    response = await client.post(
        "/api/integrations/acme/connect", json={"return_to": return_to}, headers=headers
    )
    assert response.status_code == status, response.text
    if status == 400:
        assert "return_to" in response.json()["detail"]


async def test_connect_needs_a_configured_client_and_a_person(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    missing = await client.post("/api/integrations/acme/connect", json={}, headers=headers)
    assert missing.status_code == 404
    await put_client(client, headers, provider)
    key = await client.post(
        "/api/api-keys", json={"name": "automation", "scopes": ["admin"]}, headers=headers
    )
    assert key.status_code == 200, key.text
    by_key = await client.post(
        "/api/integrations/acme/connect", json={}, headers={"Authorization": f"Bearer {key.json()['secret']}"}
    )
    assert by_key.status_code == 403 and "person" in by_key.json()["detail"]


@pytest.mark.parametrize("auth_method", ["client_secret_basic", "client_secret_post"])
async def test_full_flow_stores_tokens_sealed_and_they_work(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession, auth_method: Any, app: Any
) -> None:
    provider.client.auth_method = auth_method
    headers = await admin_headers(client)
    await put_client(client, headers, provider, token_auth_method=auth_method)
    started = await connect(client, headers, body={"return_to": "/settings"})
    callback_path = await browse(started["authorization_url"])
    response = await client.get(callback_path)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["status"] == "connected" and out["provider"] == "acme"
    assert out["organization_id"] == headers["X-Organization-Id"]
    assert out["scopes"] == ["calendar.read", "offline_access"]
    assert out["return_to"] == "/settings"
    assert out["connection_id"].startswith("icn_")

    grant = provider.stub.grants[-1]
    assert grant["grant_type"] == "authorization_code"
    assert grant["auth"] == ("basic" if auth_method == "client_secret_basic" else "post")
    assert "client_secret" not in grant or auth_method == "client_secret_post"
    assert grant["redirect_uri"] == "http://parley.test/api/integrations/oauth/callback"
    challenge = query_of(started["authorization_url"])["code_challenge"]
    digest = hashlib.sha256(grant["code_verifier"].encode()).digest()
    assert base64.urlsafe_b64encode(digest).decode().rstrip("=") == challenge

    row = await db_session.get(IntegrationConnection, out["connection_id"])
    assert row is not None and row.status == "active"
    issued = [t for t in provider.stub.access_tokens]
    assert issued and all(t not in row.access_token for t in issued)
    assert row.refresh_token is not None and row.refresh_token.startswith("v1:")

    # Read back masked; the stored token is a working one at the provider's resource.
    shown = (await client.get(f"/api/integrations/connections/{row.id}", headers=headers)).json()
    assert shown["access_token"].startswith("••••") and shown["refresh_token"].startswith("••••")
    assert shown["access_token"][-4:] == issued[-1][-4:]
    listed = (await client.get("/api/integrations/connections", headers=headers)).json()
    assert [c["id"] for c in listed["items"]] == [row.id]
    from parley.integrations.service import access_token_for

    token = await access_token_for(app.state.db, app.state.settings, row.id)
    assert token.refreshed is False
    async with httpx.AsyncClient() as http:
        me = await http.get(f"{provider.url}/userinfo", headers={"Authorization": f"Bearer {token.token}"})
    assert me.status_code == 200

    # The callback wrote its own audit event (it has no bearer token).
    event = await db_session.scalar(
        select(AuditEvent).where(
            AuditEvent.action == "integration_connected", AuditEvent.resource_id == row.id
        )
    )
    assert event is not None and event.organization_id == headers["X-Organization-Id"]

    # The same callback again: the state is used up.
    again = await client.get(callback_path)
    assert again.status_code == 400 and "already used" in again.json()["detail"]

    providers = (await client.get("/api/integrations/providers", headers=headers)).json()["items"]
    assert next(p for p in providers if p["key"] == "acme")["connected"] is True


async def test_callback_html_for_browsers(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    started = await connect(client, headers, body={"return_to": "https://app.example.com/x?a=1&b=<2>"})
    response = await client.get(
        await browse(started["authorization_url"]), headers={"Accept": "text/html,application/xhtml+xml"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert '<a href="https://app.example.com/x?a=1&amp;b=&lt;2&gt;">Continue</a>' in response.text


async def test_reconnecting_updates_the_one_connection(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    first = await connect_fully(client, headers)
    second = await connect_fully(client, headers)
    assert first["connection_id"] == second["connection_id"]


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("", "no state"),
        ("?code=abc", "no state"),
        ("?code=abc&state=forged-state-value", "not one this server issued"),
        ("?error=access_denied", "no state"),
    ],
)
async def test_callback_rejects_missing_or_wrong_state(
    client: httpx.AsyncClient, provider: Provider, query: str, fragment: str
) -> None:
    response = await client.get(CALLBACK + query)
    assert response.status_code == 400
    assert fragment in response.json()["detail"]
    assert provider.stub.grants == []


async def test_expired_state_is_refused(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    started = await connect(client, headers)
    callback_path = await browse(started["authorization_url"])
    await db_session.execute(
        update(OAuthState)
        .where(OAuthState.state_hash == sha256_hex(started["state"]))
        .values(expires_at=utcnow() - timedelta(seconds=1))
    )
    await db_session.commit()
    response = await client.get(callback_path)
    assert response.status_code == 400 and "expired" in response.json()["detail"]
    assert provider.stub.grants == []


async def test_access_denied_is_a_clear_400_and_consumes_the_state(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    provider.stub.decision = "deny"
    started = await connect(client, headers)
    callback_path = await browse(started["authorization_url"])
    assert "error=access_denied" in callback_path
    response = await client.get(callback_path)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "did not grant access" in detail and "access_denied" in detail and "declined" in detail

    row = await db_session.scalar(
        select(OAuthState).where(OAuthState.state_hash == sha256_hex(started["state"]))
    )
    assert row is not None and row.consumed_at is not None
    # A code arriving later for the same state is refused.
    late = await client.get(f"{CALLBACK}?code=whatever&state={started['state']}")
    assert late.status_code == 400 and "already used" in late.json()["detail"]
    assert provider.stub.grants == []
    assert (await client.get("/api/integrations/connections", headers=headers)).json()["items"] == []


async def test_token_endpoint_refusal_is_502_with_the_reason(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider, client_secret="wrong-secret-0000")
    started = await connect(client, headers)
    callback_path = await browse(started["authorization_url"])
    response = await client.get(callback_path)
    assert response.status_code == 502
    body = response.json()
    assert body["code"] == "upstream_error"
    assert "invalid_client" in body["detail"] and "Client authentication failed" in body["detail"]
    # The state was used up by the failed attempt.
    again = await client.get(callback_path)
    assert again.status_code == 400 and "already used" in again.json()["detail"]


@pytest.mark.parametrize(
    ("failure", "fragment"),
    [
        ((503, "<html>upstream down</html>"), "HTTP 503: <html>upstream down</html>"),
        ((200, {"token_type": "Bearer"}), "without an access token"),
        (
            (400, {"error": "invalid_grant", "error_description": "Code expired"}),
            "invalid_grant: Code expired",
        ),
    ],
)
async def test_token_endpoint_failures(
    client: httpx.AsyncClient, provider: Provider, failure: tuple[int, Any], fragment: str
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    provider.stub.token_failure = failure
    started = await connect(client, headers)
    response = await client.get(await browse(started["authorization_url"]))
    assert response.status_code == 502, response.text
    assert fragment in response.json()["detail"]


async def test_unreachable_or_private_token_endpoint(
    client: httpx.AsyncClient, provider: Provider, settings: Any
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider, token_url="https://10.1.2.3/token")
    started = await connect(client, headers)
    response = await client.get(f"{CALLBACK}?code=abc&state={started['state']}")
    assert response.status_code == 502
    assert "non-public address" in response.json()["detail"]


async def test_callback_checks_the_person_is_still_allowed(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    org_id = headers["X-Organization-Id"]
    await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "admin"}, headers=headers
    )
    bob = auth(BOB, org_id)
    await put_client(client, headers, provider)
    started = await connect(client, bob)
    members = (await client.get(f"/api/organizations/{org_id}/members", headers=headers)).json()
    bob_id = next(m["user_id"] for m in members if m["subject"] == "bob")
    demote = await client.patch(
        f"/api/organizations/{org_id}/members/{bob_id}", json={"role": "viewer"}, headers=headers
    )
    assert demote.status_code == 200, demote.text
    response = await client.get(await browse(started["authorization_url"]))
    assert response.status_code == 400 and "no longer" in response.json()["detail"]
    assert provider.stub.grants == []
