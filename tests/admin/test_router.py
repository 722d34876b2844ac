from __future__ import annotations

import httpx

from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org

ADMIN = make_token("root-admin")
CLAIM_ADMIN = make_token("ops", roles=["platform_admin"])


async def test_admin_lists_any_organizations_users(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    await client.post(
        f"/api/organizations/{org['id']}/members",
        json={"subject": "bob", "role": "viewer"},
        headers=auth(ALICE),
    )
    for token in (ADMIN, CLAIM_ADMIN):
        response = await client.get(f"/api/admin/organizations/{org['id']}/users", headers=auth(token))
        assert response.status_code == 200, response.text
        assert sorted((u["subject"], u["role"]) for u in response.json()) == [
            ("alice", "owner"),
            ("bob", "viewer"),
        ]
    listed = (await client.get("/api/admin/organizations", headers=auth(ADMIN))).json()
    assert [(o["name"], o["member_count"]) for o in listed["items"]] == [("Autohaus Demo", 2)]
    searched = (
        await client.get("/api/admin/organizations", params={"q": "nothing"}, headers=auth(ADMIN))
    ).json()
    assert searched["items"] == []


async def test_non_admins_get_403(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    for token in (ALICE, BOB):
        response = await client.get(f"/api/admin/organizations/{org['id']}/users", headers=auth(token))
        assert response.status_code == 403
        assert "platform administrators" in response.json()["detail"]
    key = (
        await client.post(
            "/api/api-keys", json={"name": "k", "scopes": ["admin"]}, headers=auth(ALICE, str(org["id"]))
        )
    ).json()
    by_key = await client.get(
        "/api/admin/organizations", headers={"Authorization": f"Bearer {key['secret']}"}
    )
    assert by_key.status_code == 403


async def test_unknown_organization_is_404_for_admins(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/admin/organizations/org_missing/users", headers=auth(ADMIN))
    assert response.status_code == 404
