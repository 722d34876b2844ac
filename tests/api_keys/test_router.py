from __future__ import annotations

import hashlib

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import ApiKey
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org


async def test_create_shows_secret_once_and_stores_only_its_hash(
    client: httpx.AsyncClient, db_session: AsyncSession
) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    created = await client.post(
        "/api/api-keys", json={"name": "order sync", "scopes": ["write", "read"]}, headers=headers
    )
    assert created.status_code == 200, created.text
    body = created.json()
    secret = body["secret"]
    assert secret.startswith("pk_") and body["hint"] == secret[-4:]
    assert body["scopes"] == ["read", "write"] and body["status"] == "active"

    fetched = await client.get(f"/api/api-keys/{body['id']}", headers=headers)
    assert fetched.status_code == 200
    assert "secret" not in fetched.json() and "key_hash" not in fetched.json()
    assert secret not in fetched.text

    row = await db_session.scalar(select(ApiKey).where(ApiKey.id == body["id"]))
    assert row is not None
    assert row.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(row.__dict__)


async def test_key_authenticates_within_its_organization_and_scopes(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    other = await create_org(client, BOB, name="Other")
    admin_key = (
        await client.post(
            "/api/api-keys", json={"name": "ops", "scopes": ["admin"]}, headers=auth(ALICE, str(org["id"]))
        )
    ).json()
    key_headers = {"Authorization": f"Bearer {admin_key['secret']}"}

    me_response = await client.get("/api/me", headers=key_headers)
    assert me_response.status_code == 200, me_response.text
    me = me_response.json()
    assert me["kind"] == "api_key" and me["memberships"][0]["organization_id"] == org["id"]
    listed = await client.get("/api/api-keys", headers=key_headers)
    assert listed.status_code == 200 and len(listed.json()["items"]) == 1

    # Another organization stays invisible to the key.
    assert (
        await client.get("/api/api-keys", headers={**key_headers, "X-Organization-Id": str(other["id"])})
    ).status_code == 404
    assert (await client.get(f"/api/organizations/{other['id']}", headers=key_headers)).status_code == 404
    # A key cannot mint a key with scopes beyond its own, nor create organizations.
    read_key = (
        await client.post("/api/api-keys", json={"name": "ro", "scopes": ["read"]}, headers=key_headers)
    ).json()
    assert (
        await client.post("/api/organizations", json={"name": "N"}, headers=key_headers)
    ).status_code == 403
    ro_headers = {"Authorization": f"Bearer {read_key['secret']}"}
    assert (await client.get("/api/api-keys", headers=ro_headers)).status_code == 403


async def test_revoked_key_is_rejected(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    key = (await client.post("/api/api-keys", json={"name": "temp"}, headers=headers)).json()
    revoked = await client.post(f"/api/api-keys/{key['id']}/revoke", headers=headers)
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    again = await client.post(f"/api/api-keys/{key['id']}/revoke", headers=headers)
    assert again.status_code == 409
    rejected = await client.get("/api/me", headers={"Authorization": f"Bearer {key['secret']}"})
    assert rejected.status_code == 401
    assert "revoked" in rejected.json()["detail"]
    assert rejected.headers["www-authenticate"] == "Bearer"
    active = (await client.get("/api/api-keys?status=active", headers=headers)).json()["items"]
    assert active == []


async def test_pagination_walks_every_key_once(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    created = [
        (await client.post("/api/api-keys", json={"name": f"k{i}"}, headers=headers)).json()["id"]
        for i in range(7)
    ]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/api/api-keys", params=params, headers=headers)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(created, reverse=True)
    bad = await client.get("/api/api-keys", params={"cursor": "!!not-a-cursor"}, headers=headers)
    assert bad.status_code == 400 and "cursor" in bad.json()["detail"]
    too_many = await client.get("/api/api-keys", params={"limit": "500"}, headers=headers)
    assert too_many.status_code == 422


async def test_key_of_another_organization_is_404(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = (await client.post("/api/api-keys", json={"name": "k"}, headers=auth(ALICE, str(org["id"])))).json()
    other = await create_org(client, make_token("mallory"), name="Mallory")
    response = await client.get(
        f"/api/api-keys/{key['id']}", headers=auth(make_token("mallory"), str(other["id"]))
    )
    assert response.status_code == 404
    revoke = await client.post(
        f"/api/api-keys/{key['id']}/revoke", headers=auth(make_token("mallory"), str(other["id"]))
    )
    assert revoke.status_code == 404


async def test_get_answers_the_key_as_create_and_revoke_did(client: httpx.AsyncClient) -> None:
    """GET reads the row without an ORM object: the same fields and values as the other answers."""
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    created = (
        await client.post("/api/api-keys", json={"name": "k", "expires_in_days": 3}, headers=headers)
    ).json()
    got = (await client.get(f"/api/api-keys/{created['id']}", headers=headers)).json()
    assert got == {name: value for name, value in created.items() if name != "secret"}
    assert got["status"] == "active" and got["expires_at"].endswith("Z")
    revoked = (await client.post(f"/api/api-keys/{created['id']}/revoke", headers=headers)).json()
    assert (await client.get(f"/api/api-keys/{created['id']}", headers=headers)).json() == revoked
    assert revoked["status"] == "revoked"
