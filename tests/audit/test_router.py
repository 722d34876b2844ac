from __future__ import annotations

import httpx

from tests.conftest import auth
from tests.organizations.test_router import ALICE, BOB, create_org


async def test_every_mutation_is_audited(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    org_id = str(org["id"])
    headers = auth(ALICE, org_id)
    key = (await client.post("/api/api-keys", json={"name": "k"}, headers=headers)).json()
    await client.post(f"/api/api-keys/{key['id']}/revoke", headers=headers)
    await client.patch(f"/api/organizations/{org_id}", json={"name": "New"}, headers=auth(ALICE))
    # A failed mutation leaves no audit event behind (its transaction rolled back).
    await client.patch(f"/api/organizations/{org_id}", json={"name": ""}, headers=auth(ALICE))

    page = await client.get("/api/audit/events", headers=headers, params={"limit": "50"})
    assert page.status_code == 200
    events = page.json()["items"]
    actions = [e["action"] for e in events]
    assert actions == ["update_organization", "revoke_api_key", "create_api_key", "create_organization"]
    created_key = next(e for e in events if e["action"] == "create_api_key")
    assert created_key["resource_type"] == "api_key" and created_key["resource_id"] == key["id"]
    assert created_key["actor_type"] == "user" and created_key["method"] == "POST"
    assert created_key["request_id"]
    assert key["secret"] not in page.text

    filtered = await client.get("/api/audit/events", headers=headers, params={"action": "revoke_api_key"})
    assert [e["resource_id"] for e in filtered.json()["items"]] == [key["id"]]


async def test_audit_log_needs_admin(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    await client.post(
        f"/api/organizations/{org['id']}/members",
        json={"subject": "bob", "role": "member"},
        headers=auth(ALICE),
    )
    denied = await client.get("/api/audit/events", headers=auth(BOB, str(org["id"])))
    assert denied.status_code == 403


async def test_reads_are_not_audited(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    for _ in range(3):
        await client.get(f"/api/organizations/{org['id']}", headers=auth(ALICE))
    events = (await client.get("/api/audit/events", headers=headers)).json()["items"]
    assert [e["action"] for e in events] == ["create_organization"]
