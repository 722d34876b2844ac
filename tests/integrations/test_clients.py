"""The provider catalog and organizations' OAuth2 clients (secrets sealed, masked on read)."""

from __future__ import annotations

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.integrations.models import IntegrationClient
from tests.conftest import auth
from tests.integrations.conftest import Provider, admin_headers
from tests.integrations.helpers import put_client
from tests.organizations.test_router import BOB


async def test_catalog_has_presets_with_real_endpoints_and_the_generic_template(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    items = (await client.get("/api/integrations/providers", headers=headers)).json()["items"]
    by_key = {item["key"]: item for item in items}
    assert set(by_key) == {"google", "microsoft", "generic"}
    google = by_key["google"]
    assert google["kind"] == "preset"
    assert google["authorize_url"] == "https://accounts.google.com/o/oauth2/v2/auth"
    assert google["token_url"] == "https://oauth2.googleapis.com/token"
    assert google["revocation_url"] == "https://oauth2.googleapis.com/revoke"
    assert google["default_scopes"] == ["openid", "email", "profile"]
    assert google["configured"] is False and google["connected"] is False
    microsoft = by_key["microsoft"]
    assert microsoft["token_url"] == "https://login.microsoftonline.com/common/oauth2/v2.0/token"
    assert "offline_access" in microsoft["default_scopes"]
    assert microsoft["revocation_url"] is None
    assert by_key["generic"]["required_fields"] == [
        "client_id",
        "client_secret",
        "authorize_url",
        "token_url",
        "scopes",
    ]

    await put_client(client, headers, provider, "acme", name="Acme CRM")
    items = (await client.get("/api/integrations/providers", headers=headers)).json()["items"]
    acme = next(item for item in items if item["key"] == "acme")
    assert acme["kind"] == "custom" and acme["name"] == "Acme CRM" and acme["configured"] is True
    assert acme["token_url"] == f"{provider.url}/token"


async def test_client_secret_is_sealed_and_masked(
    client: httpx.AsyncClient, provider: Provider, db_session: AsyncSession
) -> None:
    headers = await admin_headers(client)
    out = await put_client(client, headers, provider)
    secret = provider.client.client_secret
    assert out["client_secret"] == "••••" + secret[-4:]
    assert out["redirect_uri"] == "http://parley.test/api/integrations/oauth/callback"
    row = await db_session.scalar(select(IntegrationClient).where(IntegrationClient.provider == "acme"))
    assert row is not None and row.client_secret is not None
    assert secret not in row.client_secret and row.client_secret.startswith("v1:")

    # Sending back the masked hint (or nothing) keeps the secret; a new secret replaces it.
    body = provider.client_body(client_secret=out["client_secret"], name="Renamed")
    again = await client.put("/api/integrations/acme/client", json=body, headers=headers)
    assert again.status_code == 200 and again.json()["client_secret"] == out["client_secret"]
    body.pop("client_secret")
    assert (await client.put("/api/integrations/acme/client", json=body, headers=headers)).json()[
        "client_secret"
    ] == out["client_secret"]
    body["client_secret"] = "another-secret-9876"
    assert (await client.put("/api/integrations/acme/client", json=body, headers=headers)).json()[
        "client_secret"
    ] == "••••9876"
    shown = (await client.get("/api/integrations/acme/client", headers=headers)).json()
    assert shown["client_secret"] == "••••9876" and shown["name"] == "Renamed"


async def test_client_bodies_as_multipart_and_text(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    body = provider.client_body()
    form = {k: v for k, v in body.items() if k != "scopes"}
    form["scopes"] = '["a.read", "b.write"]'
    response = await client.put(
        "/api/integrations/acme/client", data=form, files={"attachment": ("x.txt", b"a")}, headers=headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["scopes"] == ["a.read", "b.write"]
    import json

    text = await client.put(
        "/api/integrations/other/client",
        content=json.dumps(body),
        headers={**headers, "Content-Type": "text/plain"},
    )
    assert text.status_code == 200, text.text


async def test_preset_needs_only_client_credentials_and_refuses_endpoints(client: httpx.AsyncClient) -> None:
    headers = await admin_headers(client)
    response = await client.put(
        "/api/integrations/google/client",
        json={"client_id": "123.apps.googleusercontent.com", "client_secret": "GOCSPX-abcdefgh"},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["authorize_url"] == "https://accounts.google.com/o/oauth2/v2/auth"
    assert out["scopes"] == ["openid", "email", "profile"]
    assert out["token_auth_method"] == "client_secret_post"

    refused = await client.put(
        "/api/integrations/google/client",
        json={"client_id": "x", "client_secret": "y", "token_url": "https://evil.example/token"},
        headers=headers,
    )
    assert refused.status_code == 400 and "fixed" in refused.json()["detail"]
    ms = await client.put(
        "/api/integrations/microsoft/client",
        json={"client_id": "app-id", "client_secret": "ms-secret-1234", "tenant": "contoso.onmicrosoft.com"},
        headers=headers,
    )
    assert ms.status_code == 200
    assert (
        ms.json()["token_url"]
        == "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
    )
    tenant_on_google = await client.put(
        "/api/integrations/google/client",
        json={"client_id": "x", "client_secret": "y", "tenant": "abc"},
        headers=headers,
    )
    assert tenant_on_google.status_code == 400


async def test_custom_provider_validation(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    missing = await client.put(
        "/api/integrations/acme/client", json={"client_id": "a", "client_secret": "b"}, headers=headers
    )
    assert missing.status_code == 400 and "authorize_url and token_url" in missing.json()["detail"]
    no_scopes = await client.put(
        "/api/integrations/acme/client", json=provider.client_body(scopes=[]), headers=headers
    )
    assert no_scopes.status_code == 400 and "scopes" in no_scopes.json()["detail"]
    plain_http = await client.put(
        "/api/integrations/acme/client",
        json=provider.client_body(token_url="http://idp.example.com/token"),
        headers=headers,
    )
    assert plain_http.status_code == 400 and "https" in plain_http.json()["detail"]
    bad_scope = await client.put(
        "/api/integrations/acme/client", json=provider.client_body(scopes=["two words"]), headers=headers
    )
    assert bad_scope.status_code == 422
    no_secret = await client.put(
        "/api/integrations/acme/client", json=provider.client_body(client_secret=None), headers=headers
    )
    assert no_secret.status_code == 400 and "client_secret" in no_secret.json()["detail"]
    for key in ("generic", "oauth", "connections", "Bad_Key"):
        response = await client.put(
            f"/api/integrations/{key}/client", json=provider.client_body(), headers=headers
        )
        assert response.status_code == 404, key
    unknown = await client.get("/api/integrations/acme/client", headers=headers)
    assert unknown.status_code == 404 and "PUT /api/integrations/acme/client" in unknown.json()["detail"]


async def test_roles_and_tenancy(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    org_id = headers["X-Organization-Id"]
    await put_client(client, headers, provider)
    # Bob is a viewer: may read, not configure or connect.
    add = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=headers
    )
    assert add.status_code == 200, add.text
    bob = auth(BOB, org_id)
    assert (await client.get("/api/integrations/acme/client", headers=bob)).status_code == 200
    assert (
        await client.put("/api/integrations/acme/client", json=provider.client_body(), headers=bob)
    ).status_code == 403
    assert (await client.post("/api/integrations/acme/connect", json={}, headers=bob)).status_code == 403
    # Another organization sees nothing of it.
    other = await admin_headers(client)
    assert (await client.get("/api/integrations/acme/client", headers=other)).status_code == 404


async def test_delete_client(client: httpx.AsyncClient, provider: Provider) -> None:
    headers = await admin_headers(client)
    created = await put_client(client, headers, provider)
    response = await client.delete("/api/integrations/acme/client", headers=headers)
    assert response.status_code == 200 and response.json()["deleted"] is True
    assert (await client.get("/api/integrations/acme/client", headers=headers)).status_code == 404
    assert created["provider"] == "acme"
