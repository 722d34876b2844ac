from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import Organization
from tests.conftest import auth, make_token

ALICE = make_token("alice", email="alice@example.com", name="Alice")
BOB = make_token("bob", name="Bob")


async def create_org(
    client: httpx.AsyncClient, token: str = ALICE, name: str = "Autohaus Demo"
) -> dict[str, object]:
    response = await client.post("/api/organizations", json={"name": name}, headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_create_organization_makes_the_caller_owner(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    assert org["name"] == "Autohaus Demo"
    assert org["slug"] == "autohaus-demo"
    assert org["role"] == "owner"
    assert str(org["id"]).startswith("org_")

    me = (await client.get("/api/me", headers=auth(ALICE))).json()
    assert me["memberships"] == [
        {"organization_id": org["id"], "organization_name": "Autohaus Demo", "role": "owner"}
    ]
    members = (await client.get(f"/api/organizations/{org['id']}/members", headers=auth(ALICE))).json()
    assert [(m["subject"], m["role"], m["email"]) for m in members] == [
        ("alice", "owner", "alice@example.com")
    ]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", '{"name": "Werkstatt Müller"}'),
        ("text/plain", '{"name": "Werkstatt Müller"}'),
    ],
)
async def test_create_accepts_json_and_text_plain(
    client: httpx.AsyncClient, content_type: str, body: str
) -> None:
    response = await client.post(
        "/api/organizations",
        content=body.encode(),
        headers={**auth(ALICE), "Content-Type": f"{content_type}; charset=utf-8"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "Werkstatt Müller"
    assert response.json()["slug"] == "werkstatt-muller"


async def test_create_accepts_multipart_form(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/organizations",
        files={"name": (None, "Karosserie Nord"), "default_language": (None, "en")},
        headers=auth(ALICE),
    )
    assert response.status_code == 200, response.text
    assert response.json()["default_language"] == "en"


async def test_slugs_stay_unique(client: httpx.AsyncClient) -> None:
    first = await create_org(client, name="Same Name")
    second = await create_org(client, name="Same Name")
    assert first["slug"] == "same-name"
    assert second["slug"] == "same-name-2"
    clash = await client.post(
        "/api/organizations", json={"name": "X", "slug": "same-name"}, headers=auth(ALICE)
    )
    assert clash.status_code == 409
    assert clash.json()["code"] == "conflict"


@pytest.mark.parametrize(
    ("body", "content_type", "status", "fragment"),
    [
        (b'{"name": ', "application/json", 422, "json_invalid"),
        (b"", "application/json", 422, "missing"),
        (b'{"name": 5}', "application/json", 422, "string_type"),
        (b'{"name": ""}', "application/json", 422, "string_too_short"),
        (b'{"name": "X", "organization_id": "org_1"}', "application/json", 422, "extra_forbidden"),
        (b'{"name": "X", "role": "owner"}', "application/json", 422, "extra_forbidden"),
        (b'{"name": "X", "timezone": "Mars/Olympus"}', "application/json", 422, "IANA"),
        (b"<org/>", "application/xml", 415, "application/json"),
        (b"[1, 2]", "application/json", 422, "model_type"),
    ],
)
async def test_bad_bodies_get_clear_errors_and_write_nothing(
    client: httpx.AsyncClient,
    db_session: AsyncSession,
    body: bytes,
    content_type: str,
    status: int,
    fragment: str,
) -> None:
    before = await db_session.scalar(select(func.count()).select_from(Organization))
    response = await client.post(
        "/api/organizations", content=body, headers={**auth(ALICE), "Content-Type": content_type}
    )
    assert response.status_code == status, response.text
    assert fragment in response.text
    if status == 422:
        assert isinstance(response.json()["detail"], list)
        assert response.json()["detail"][0]["loc"][0] == "body"
    after = await db_session.scalar(select(func.count()).select_from(Organization))
    assert before == after


async def test_oversized_body_is_413(client: httpx.AsyncClient, app: object) -> None:
    big = b'{"name": "' + b"x" * (11 * 1024 * 1024) + b'"}'
    response = await client.post(
        "/api/organizations", content=big, headers={**auth(ALICE), "Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


async def test_another_organizations_id_is_404(client: httpx.AsyncClient) -> None:
    org = await create_org(client, ALICE)
    await create_org(client, BOB, name="Bob's Garage")
    for method, path in [
        ("GET", f"/api/organizations/{org['id']}"),
        ("PATCH", f"/api/organizations/{org['id']}"),
        ("DELETE", f"/api/organizations/{org['id']}"),
        ("GET", f"/api/organizations/{org['id']}/members"),
    ]:
        response = await client.request(method, path, headers=auth(BOB), json={"name": "hijack"})
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["code"] == "not_found"
    # The header route to the same organization is also a 404 for a non-member.
    response = await client.get("/api/api-keys", headers=auth(BOB, str(org["id"])))
    assert response.status_code == 404


async def test_roles_limit_what_members_can_do(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    org_id = str(org["id"])
    added = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=auth(ALICE)
    )
    assert added.status_code == 200, added.text
    bob_id = added.json()["user_id"]

    # A viewer reads but does not write.
    assert (await client.get(f"/api/organizations/{org_id}", headers=auth(BOB))).json()["role"] == "viewer"
    denied = await client.patch(f"/api/organizations/{org_id}", json={"name": "Mine"}, headers=auth(BOB))
    assert denied.status_code == 403
    assert "admin role" in denied.json()["detail"]
    assert (
        await client.post("/api/api-keys", json={"name": "k"}, headers=auth(BOB, org_id))
    ).status_code == 403

    # Admins manage, but only owners grant owner.
    promoted = await client.patch(
        f"/api/organizations/{org_id}/members/{bob_id}", json={"role": "admin"}, headers=auth(ALICE)
    )
    assert promoted.json()["role"] == "admin"
    renamed = await client.patch(f"/api/organizations/{org_id}", json={"name": "Renamed"}, headers=auth(BOB))
    assert renamed.status_code == 200 and renamed.json()["name"] == "Renamed"
    self_owner = await client.patch(
        f"/api/organizations/{org_id}/members/{bob_id}", json={"role": "owner"}, headers=auth(BOB)
    )
    assert self_owner.status_code == 403
    assert (await client.delete(f"/api/organizations/{org_id}", headers=auth(BOB))).status_code == 403


async def test_last_owner_cannot_leave(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    me = (await client.get("/api/me", headers=auth(ALICE))).json()
    demote = await client.patch(
        f"/api/organizations/{org['id']}/members/{me['id']}", json={"role": "member"}, headers=auth(ALICE)
    )
    assert demote.status_code == 409
    remove = await client.delete(f"/api/organizations/{org['id']}/members/{me['id']}", headers=auth(ALICE))
    assert remove.status_code == 409
    assert "owner" in remove.json()["detail"]


async def test_duplicate_member_is_conflict(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    path = f"/api/organizations/{org['id']}/members"
    assert (await client.post(path, json={"subject": "carol"}, headers=auth(ALICE))).status_code == 200
    again = await client.post(path, json={"subject": "carol"}, headers=auth(ALICE))
    assert again.status_code == 409


async def test_active_organization_selection(client: httpx.AsyncClient) -> None:
    none_yet = await client.get("/api/api-keys", headers=auth(ALICE))
    assert none_yet.status_code == 400
    assert "POST /api/organizations" in none_yet.json()["detail"]

    first = await create_org(client, name="One")
    only = await client.get("/api/api-keys", headers=auth(ALICE))
    assert only.status_code == 200

    await create_org(client, name="Two")
    ambiguous = await client.get("/api/api-keys", headers=auth(ALICE))
    assert ambiguous.status_code == 400
    assert "X-Organization-Id" in ambiguous.json()["detail"]
    chosen = await client.get("/api/api-keys", headers=auth(ALICE, str(first["id"])))
    assert chosen.status_code == 200
    unknown = await client.get("/api/api-keys", headers=auth(ALICE, "org_does_not_exist"))
    assert unknown.status_code == 404


async def test_delete_organization(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    deleted = await client.delete(f"/api/organizations/{org['id']}", headers=auth(ALICE))
    assert deleted.json() == {"id": org["id"], "deleted": True}
    assert (await client.get(f"/api/organizations/{org['id']}", headers=auth(ALICE))).status_code == 404
    assert (await client.get("/api/organizations", headers=auth(ALICE))).json() == []


async def test_list_organizations_shows_roles(client: httpx.AsyncClient) -> None:
    await create_org(client, name="Mine")
    listed = (await client.get("/api/organizations", headers=auth(ALICE))).json()
    assert [(o["name"], o["role"]) for o in listed] == [("Mine", "owner")]
