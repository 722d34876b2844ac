"""Issue 18: API keys follow the people who made them. Removing or demoting a member revokes the keys
they created that grant more than their new role, and the audit log names them."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import auth
from tests.organizations.test_router import ALICE, BOB, create_org


async def _member(client: httpx.AsyncClient, org_id: str, subject: str, role: str) -> str:
    added = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": subject, "role": role}, headers=auth(ALICE)
    )
    assert added.status_code == 200, added.text
    return str(added.json()["user_id"])


async def _key(
    client: httpx.AsyncClient, token: str, org_id: str, name: str, scopes: list[str]
) -> dict[str, Any]:
    created = await client.post(
        "/api/api-keys", json={"name": name, "scopes": scopes}, headers=auth(token, org_id)
    )
    assert created.status_code == 200, created.text
    return dict(created.json())


def _bearer(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['secret']}"}


async def _membership_event(client: httpx.AsyncClient, org_id: str, action: str) -> dict[str, Any]:
    events = await client.get("/api/audit/events", headers=auth(ALICE, org_id), params={"action": action})
    assert events.status_code == 200, events.text
    return dict(events.json()["items"][0])


async def test_a_removed_admins_key_is_refused_and_cannot_add_its_creator_back(
    client: httpx.AsyncClient,
) -> None:
    org_id = str((await create_org(client))["id"])
    bob_id = await _member(client, org_id, "bob", "admin")
    admin_key = await _key(client, BOB, org_id, "bob's automation", ["admin"])
    alices_key = await _key(client, ALICE, org_id, "alice's automation", ["admin"])
    assert (await client.get("/api/me", headers=_bearer(admin_key))).status_code == 200

    removed = await client.delete(f"/api/organizations/{org_id}/members/{bob_id}", headers=auth(ALICE))
    assert removed.status_code == 200, removed.text

    # The attack of the review: the removed admin's key re-adds its creator. It is refused now.
    readd = await client.post(
        f"/api/organizations/{org_id}/members",
        json={"subject": "bob", "role": "admin"},
        headers=_bearer(admin_key),
    )
    assert readd.status_code == 401 and "revoked" in readd.json()["detail"]
    members = await client.get(f"/api/organizations/{org_id}/members", headers=auth(ALICE))
    assert bob_id not in [m["user_id"] for m in members.json()]
    # Other people's keys are untouched.
    assert (await client.get("/api/me", headers=_bearer(alices_key))).status_code == 200
    listed = await client.get(f"/api/api-keys/{admin_key['id']}", headers=auth(ALICE, org_id))
    assert listed.json()["status"] == "revoked"

    event = await _membership_event(client, org_id, "remove_member")
    assert event["resource_id"] == bob_id
    assert event["details"] == {"revoked_api_keys": [admin_key["id"]]}


async def test_a_demotion_revokes_only_the_keys_beyond_the_new_role(client: httpx.AsyncClient) -> None:
    org_id = str((await create_org(client))["id"])
    bob_id = await _member(client, org_id, "bob", "admin")
    admin_key = await _key(client, BOB, org_id, "admin", ["admin"])
    write_key = await _key(client, BOB, org_id, "write", ["write"])
    read_key = await _key(client, BOB, org_id, "read", ["read"])

    demoted = await client.patch(
        f"/api/organizations/{org_id}/members/{bob_id}", json={"role": "member"}, headers=auth(ALICE)
    )
    assert demoted.status_code == 200, demoted.text
    assert demoted.json()["role"] == "member"  # the response body is what it always was

    assert (await client.get("/api/me", headers=_bearer(admin_key))).status_code == 401
    assert (await client.get("/api/me", headers=_bearer(write_key))).status_code == 200
    assert (await client.get("/api/me", headers=_bearer(read_key))).status_code == 200
    event = await _membership_event(client, org_id, "change_member_role")
    assert event["details"] == {"role": "member", "revoked_api_keys": [admin_key["id"]]}

    # A demotion to viewer takes the write key too; the read key stays.
    await client.patch(
        f"/api/organizations/{org_id}/members/{bob_id}", json={"role": "viewer"}, headers=auth(ALICE)
    )
    assert (await client.get("/api/me", headers=_bearer(write_key))).status_code == 401
    assert (await client.get("/api/me", headers=_bearer(read_key))).status_code == 200


async def test_a_change_that_revokes_nothing_audits_as_before(client: httpx.AsyncClient) -> None:
    org_id = str((await create_org(client))["id"])
    bob_id = await _member(client, org_id, "bob", "admin")
    key = await _key(client, BOB, org_id, "write", ["write"])
    for role in ("owner", "member"):  # a promotion, then a demotion the key stays within
        changed = await client.patch(
            f"/api/organizations/{org_id}/members/{bob_id}", json={"role": role}, headers=auth(ALICE)
        )
        assert changed.status_code == 200, changed.text
        assert (await client.get("/api/me", headers=_bearer(key))).status_code == 200
    event = await _membership_event(client, org_id, "change_member_role")
    assert event["details"] == {"role": "member"}
