"""Numbers, trunks and dispatch rules: organization-scoped CRUD, validation, secrets masked."""

from __future__ import annotations

import httpx

from parley.kit.crypto import SecretBox
from tests.conftest import make_token
from tests.telephony.conftest import Org, new_org

BOB = make_token("bob", name="Bob")


async def test_phone_numbers_crud_and_scoping(org: Org, client: httpx.AsyncClient) -> None:
    created = await org.make(
        "/api/telephony/numbers",
        {"number": "+49 30 1234567", "provider": "twilio", "name": "Front desk", "flow_id": org.flow_id},
    )
    assert created["number"] == "+49301234567" and created["flow_id"] == org.flow_id
    assert created["id"].startswith("pn_") and created["provider_id"] is None

    listed = (await org.get("/api/telephony/numbers?provider=twilio")).json()
    assert [n["id"] for n in listed["items"]] == [created["id"]]
    assert (await org.get("/api/telephony/numbers?provider=livekit")).json()["items"] == []

    detached = await org.patch(f"/api/telephony/numbers/{created['id']}", {"flow_id": None})
    assert detached.status_code == 200 and detached.json()["flow_id"] is None
    unknown_flow = await org.patch(f"/api/telephony/numbers/{created['id']}", {"flow_id": "flow_nope"})
    assert unknown_flow.status_code == 404

    # A number belongs to one organization platform-wide; another org cannot see or take it.
    other = await new_org(client, BOB, "Other shop")
    assert (await other.get(f"/api/telephony/numbers/{created['id']}")).status_code == 404
    taken = await other.post("/api/telephony/numbers", {"number": "+49301234567", "provider": "twilio"})
    assert taken.status_code == 409 and "already registered" in taken.json()["detail"]

    deleted = await org.delete(f"/api/telephony/numbers/{created['id']}")
    assert deleted.json() == {"id": created["id"], "deleted": True}
    assert (await org.get(f"/api/telephony/numbers/{created['id']}")).status_code == 404


async def test_malformed_e164_is_a_clear_422(org: Org) -> None:
    for bad in ("030 1234567", "+0301234567", "+49301234567890123", "call me"):
        response = await org.post("/api/telephony/numbers", {"number": bad, "provider": "twilio"})
        assert response.status_code == 422, bad
        message = response.json()["detail"][0]["msg"]
        assert "E.164" in message and "+4930123456" in message
    outbound = await org.post(
        "/api/calls/outbound", {"flow_id": org.flow_id, "to": "0049-30", "from_number": "+49301234567"}
    )
    assert outbound.status_code == 422 and outbound.json()["detail"][0]["loc"] == ["body", "to"]


async def test_bodies_arrive_as_multipart_and_text_too(org: Org) -> None:
    form = await org.client.post(
        "/api/telephony/numbers",
        data={"number": "+4940111222", "provider": "livekit"},
        files={"ignored": ("a.txt", b"x")},
        headers=org.headers,
    )
    assert form.status_code == 200, form.text
    text = await org.client.post(
        "/api/telephony/numbers",
        content=b'{"number": "+4940111333", "provider": "livekit"}',
        headers={**org.headers, "Content-Type": "text/plain"},
    )
    assert text.status_code == 200, text.text


async def test_trunks_validate_their_direction_and_mask_the_password(org: Org, settings: object) -> None:
    inbound = await org.make(
        "/api/telephony/trunks",
        {
            "name": "Carrier in",
            "direction": "inbound",
            "numbers": ["+49301234567"],
            "allowed_addresses": ["203.0.113.0/24"],
            "allowed_numbers": ["+491701234567"],
            "auth_username": "parley",
            "auth_password": "very-secret-password",
        },
    )
    assert inbound["auth_password"] == "••••word"
    assert "very-secret" not in str(inbound)

    no_address = await org.post(
        "/api/telephony/trunks", {"name": "Out", "direction": "outbound", "numbers": ["+49301234567"]}
    )
    assert no_address.status_code == 422 and "address" in no_address.text
    mixed = await org.post(
        "/api/telephony/trunks",
        {"name": "In", "direction": "inbound", "address": "sip.example.com"},
    )
    assert mixed.status_code == 422 and "outbound trunks only" in mixed.text
    bad_cidr = await org.post(
        "/api/telephony/trunks", {"name": "In2", "direction": "inbound", "allowed_addresses": ["not an ip!"]}
    )
    assert bad_cidr.status_code == 422

    duplicate = await org.post("/api/telephony/trunks", {"name": "Carrier in", "direction": "inbound"})
    assert duplicate.status_code == 409

    cleared = await org.patch(f"/api/telephony/trunks/{inbound['id']}", {"auth_password": None})
    assert cleared.status_code == 200 and cleared.json()["auth_password"] is None
    inconsistent = await org.patch(f"/api/telephony/trunks/{inbound['id']}", {"transport": "tls"})
    assert inconsistent.status_code == 409


async def test_trunk_password_is_sealed_to_its_row(org: Org, settings: object, database: object) -> None:
    from sqlalchemy import select

    from parley.telephony.models import SipTrunk

    trunk = await org.make(
        "/api/telephony/trunks",
        {"name": "Sealed", "direction": "inbound", "auth_username": "u", "auth_password": "p4ssw0rd-long"},
    )
    async with database.sessionmaker() as session:  # type: ignore[attr-defined]
        row = await session.scalar(select(SipTrunk).where(SipTrunk.id == trunk["id"]))
    assert row is not None and row.auth_password and "p4ssw0rd" not in row.auth_password
    box = SecretBox(settings.secret_key_bytes())  # type: ignore[attr-defined]
    assert (
        box.decrypt(row.auth_password, bound_to=f"telephony_sip_trunks:{row.id}:auth_password")
        == "p4ssw0rd-long"
    )


async def test_dispatch_rules_follow_livekits_model(org: Org) -> None:
    trunk = await org.make("/api/telephony/trunks", {"name": "In", "direction": "inbound"})
    rule = await org.make(
        "/api/telephony/dispatch-rules",
        {
            "name": "Callers",
            "rule_type": "individual",
            "room_prefix": "call-",
            "pin": "4711",
            "trunk_ids": [trunk["id"]],
            "numbers": ["+49301234567"],
            "attributes": {"shop": "berlin"},
            "flow_id": org.flow_id,
        },
    )
    assert rule["id"].startswith("sdr_") and rule["pin"] == "••••" and rule["trunk_ids"] == [trunk["id"]]

    unknown_trunk = await org.post(
        "/api/telephony/dispatch-rules", {"name": "X", "rule_type": "callee", "trunk_ids": ["trk_nope"]}
    )
    assert unknown_trunk.status_code == 404
    direct_without_room = await org.post(
        "/api/telephony/dispatch-rules", {"name": "D", "rule_type": "direct"}
    )
    assert direct_without_room.status_code == 422 and "room_name" in direct_without_room.text
    bad_type = await org.post("/api/telephony/dispatch-rules", {"name": "T", "rule_type": "broadcast"})
    assert bad_type.status_code == 422

    for field in ("name", "trunk_ids"):  # a PATCH may not blank what a rule must have
        blanked = await org.patch(f"/api/telephony/dispatch-rules/{rule['id']}", {field: None})
        assert blanked.status_code == 422 and f"{field} cannot be null" in blanked.json()["detail"][0]["msg"]
        assert blanked.json()["detail"][0]["loc"] == ["body", field]
    renamed = await org.patch(f"/api/telephony/dispatch-rules/{rule['id']}", {"name": "Callers"})
    assert renamed.status_code == 200
    blank_numbers = await org.patch(f"/api/telephony/trunks/{trunk['id']}", {"numbers": None})
    assert blank_numbers.status_code == 422

    in_use = await org.delete(f"/api/telephony/trunks/{trunk['id']}")
    assert in_use.status_code == 409 and "Callers" in in_use.json()["detail"]

    # Never synced: deleting touches only Parley.
    deleted = await org.delete(f"/api/telephony/dispatch-rules/{rule['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": rule["id"], "deleted": True, "provider_deleted": False}
    assert (await org.get(f"/api/telephony/dispatch-rules/{rule['id']}")).status_code == 404
    assert (await org.delete(f"/api/telephony/dispatch-rules/{rule['id']}")).status_code == 404


async def test_telephony_needs_credentials(client: httpx.AsyncClient) -> None:
    anonymous = await client.post("/api/telephony/numbers", json={"number": "+4930111", "provider": "twilio"})
    assert anonymous.status_code == 401
    assert (await client.delete("/api/telephony/dispatch-rules/sdr_x")).status_code == 401


async def test_deleting_the_organization_removes_its_telephony(org: Org, database: object) -> None:
    from sqlalchemy import func, select

    from parley.telephony.models import DispatchRule, PhoneNumber, SipTrunk

    await org.make("/api/telephony/numbers", {"number": "+4930999000", "provider": "twilio"})
    trunk = await org.make("/api/telephony/trunks", {"name": "In", "direction": "inbound"})
    await org.make(
        "/api/telephony/dispatch-rules", {"name": "R", "rule_type": "callee", "trunk_ids": [trunk["id"]]}
    )
    assert (await org.delete(f"/api/organizations/{org.id}")).status_code == 200
    async with database.sessionmaker() as session:  # type: ignore[attr-defined]
        for model in (PhoneNumber, SipTrunk, DispatchRule):
            count = await session.scalar(
                select(func.count()).select_from(model).where(model.organization_id == org.id)
            )
            assert count == 0, model.__tablename__
