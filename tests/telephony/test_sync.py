"""The admin sync against the local LiveKit Twirp server and Twilio REST stub; dispatch rule deletion."""

from __future__ import annotations

from datetime import timedelta

import httpx
from livekit.protocol import sip

from parley.kit.db import Database, utcnow
from parley.telephony.models import SyncLease
from tests.conftest import auth, make_token
from tests.stubs import livekit as lk_stub
from tests.telephony.conftest import PUBLIC_URL, Org, Stub


async def _setup(org: Org) -> dict[str, dict[str, object]]:
    inbound = await org.make(
        "/api/telephony/trunks",
        {
            "name": "Carrier in",
            "direction": "inbound",
            "numbers": ["+49301234567"],
            "allowed_addresses": ["203.0.113.0/24"],
            "auth_username": "parley",
            "auth_password": "trunk-password-123",
        },
    )
    outbound = await org.make(
        "/api/telephony/trunks",
        {
            "name": "Carrier out",
            "direction": "outbound",
            "numbers": ["+49301234567"],
            "address": "sip.carrier.example",
            "transport": "tls",
        },
    )
    rule = await org.make(
        "/api/telephony/dispatch-rules",
        {
            "name": "Callers",
            "rule_type": "individual",
            "room_prefix": "call-",
            "pin": "4711",
            "trunk_ids": [inbound["id"]],
            "attributes": {"shop": "berlin"},
            "flow_id": org.flow_id,
        },
    )
    return {"inbound": inbound, "outbound": outbound, "rule": rule}


def _ids(items: list[dict[str, object]]) -> set[object]:
    return {item["id"] for item in items}


async def test_sync_creates_then_is_idempotent_then_fixes_drift(connected: Org, livekit: Stub) -> None:
    made = await _setup(connected)
    first = await connected.sync()
    assert first.status_code == 200, first.text
    report = first.json()
    assert _ids(report["created"]) == {made["inbound"]["id"], made["outbound"]["id"], made["rule"]["id"]}
    assert report["errors"] == [] and report["orphaned"] == [] and report["updated"] == []

    state: lk_stub.LiveKitState = livekit.state
    (trunk,) = state.inbound.values()
    assert list(trunk.numbers) == ["+49301234567"] and trunk.auth_password == "trunk-password-123"
    assert list(trunk.allowed_addresses) == ["203.0.113.0/24"]
    (out,) = state.outbound.values()
    assert out.address == "sip.carrier.example" and out.transport == sip.SIPTransport.SIP_TRANSPORT_TLS
    (rule,) = state.rules.values()
    assert rule.rule.dispatch_rule_individual.room_prefix == "call-"
    assert rule.rule.dispatch_rule_individual.pin == "4711"
    assert list(rule.trunk_ids) == [trunk.sip_trunk_id] and dict(rule.attributes) == {"shop": "berlin"}
    assert connected.flow_id in rule.metadata

    local = (await connected.get(f"/api/telephony/dispatch-rules/{made['rule']['id']}")).json()
    assert local["provider_id"] == rule.sip_dispatch_rule_id and local["synced_at"] is not None

    again = (await connected.sync()).json()
    assert again["created"] == [] and again["updated"] == [] and len(again["unchanged"]) == 3
    assert len(state.inbound) == 1 and len(state.rules) == 1

    # Drift at the provider, and a change in Parley: both are brought in line.
    state.rules[rule.sip_dispatch_rule_id].name = "edited in the LiveKit console"
    await connected.patch(f"/api/telephony/trunks/{made['inbound']['id']}", {"numbers": ["+49301234568"]})
    fixed = (await connected.sync()).json()
    assert _ids(fixed["updated"]) == {made["inbound"]["id"], made["rule"]["id"]}
    assert state.rules[rule.sip_dispatch_rule_id].name == "Callers"
    assert list(state.inbound[trunk.sip_trunk_id].numbers) == ["+49301234568"]


async def test_sync_reports_orphans_and_never_deletes_them(connected: Org, livekit: Stub) -> None:
    state: lk_stub.LiveKitState = livekit.state
    state.inbound["ST_foreign"] = sip.SIPInboundTrunkInfo(sip_trunk_id="ST_foreign", name="made by hand")
    state.rules["SDR_foreign"] = sip.SIPDispatchRuleInfo(sip_dispatch_rule_id="SDR_foreign", name="hand rule")
    report = (await connected.sync()).json()
    orphans = {(o["kind"], o["provider_id"]) for o in report["orphaned"]}
    assert orphans == {("trunk", "ST_foreign"), ("dispatch_rule", "SDR_foreign")}
    assert all(o["id"] is None for o in report["orphaned"])
    assert "ST_foreign" in state.inbound and "SDR_foreign" in state.rules
    assert "DeleteSIPTrunk" not in state.calls and "DeleteSIPDispatchRule" not in state.calls


async def test_sync_finds_objects_whose_id_was_never_stored(connected: Org, livekit: Stub) -> None:
    """A sync that created objects but lost its commit must not duplicate them next time."""
    made = await _setup(connected)
    await connected.sync()
    state: lk_stub.LiveKitState = livekit.state
    for path in ("trunks/" + str(made["inbound"]["id"]), "trunks/" + str(made["outbound"]["id"])):
        assert (await connected.get(f"/api/telephony/{path}")).json()["provider_id"]
    # Forget the stored provider ids, as if the first sync's transaction had been lost.
    from sqlalchemy import update

    from parley.telephony.models import DispatchRule, SipTrunk

    database: Database = connected.client._transport.app.state.db  # type: ignore[attr-defined]
    async with database.sessionmaker() as session:
        await session.execute(update(SipTrunk).values(provider_id=None))
        await session.execute(update(DispatchRule).values(provider_id=None))
        await session.commit()
    report = (await connected.sync()).json()
    assert report["created"] == [] and len(report["unchanged"]) == 3
    assert len(state.inbound) == 1 and len(state.outbound) == 1 and len(state.rules) == 1


async def test_provider_outage_is_reported_not_raised(connected: Org, livekit: Stub, twilio: Stub) -> None:
    made = await _setup(connected)
    livekit.state.outage = True
    response = await connected.sync()
    assert response.status_code == 200
    report = response.json()
    assert _ids(report["errors"]) == {made["inbound"]["id"], made["outbound"]["id"], made["rule"]["id"]}
    assert all("down for maintenance" in e["detail"] for e in report["errors"])
    livekit.state.outage = False
    assert len((await connected.sync()).json()["created"]) == 3


async def test_sync_without_providers_lists_what_cannot_sync(org: Org) -> None:
    await org.make("/api/telephony/trunks", {"name": "In", "direction": "inbound"})
    await org.make("/api/telephony/numbers", {"number": "+4930555", "provider": "twilio"})
    report = (await org.sync()).json()
    details = sorted(e["detail"] for e in report["errors"])
    assert details == [
        "LiveKit is not configured in this organization.",
        "Twilio is not configured in this organization.",
    ]


async def test_sync_sets_the_twilio_voice_webhook(connected: Org, twilio: Stub) -> None:
    sid = twilio.state.add_number("+4930777000", voice_url="https://old.example/voice")
    foreign = twilio.state.add_number("+4930777999")
    number = await connected.make("/api/telephony/numbers", {"number": "+4930777000", "provider": "twilio"})
    missing = await connected.make("/api/telephony/numbers", {"number": "+4930777111", "provider": "twilio"})
    report = (await connected.sync()).json()
    assert _ids(report["updated"]) == {number["id"]}
    assert twilio.state.numbers[sid]["voice_url"] == f"{PUBLIC_URL}/api/telephony/twilio/voice"
    assert [e["id"] for e in report["errors"]] == [missing["id"]]
    assert "not in the Twilio account" in report["errors"][0]["detail"]
    assert [o["provider_id"] for o in report["orphaned"]] == [foreign]
    assert (await connected.get(f"/api/telephony/numbers/{number['id']}")).json()["provider_id"] == sid
    assert _ids((await connected.sync()).json()["unchanged"]) == {number["id"]}


async def test_a_running_sync_blocks_a_second_one_until_its_lease_expires(
    connected: Org, database: Database
) -> None:
    """The lease is a database row, so it holds across processes; a dead holder's lease expires."""
    async with database.sessionmaker() as session:
        session.add(
            SyncLease(
                id="sync_other",
                organization_id=connected.id,
                holder="sync_other",
                expires_at=utcnow() + timedelta(minutes=5),
            )
        )
        await session.commit()
    blocked = await connected.sync()
    assert blocked.status_code == 409 and "already running" in blocked.json()["detail"]

    async with database.sessionmaker() as session:
        lease = await session.get(SyncLease, "sync_other")
        assert lease is not None
        lease.expires_at = utcnow() - timedelta(seconds=1)
        await session.commit()
    assert (await connected.sync()).status_code == 200
    # The finished sync released its own lease.
    assert (await connected.sync()).status_code == 200


async def test_only_platform_admins_sync(connected: Org, client: httpx.AsyncClient) -> None:
    refused = await client.post(
        f"/api/admin/organizations/{connected.id}/telephony/sync", headers=connected.headers
    )
    assert refused.status_code == 403
    unknown = await client.post(
        "/api/admin/organizations/org_missing/telephony/sync", headers=auth(make_token("root-admin"))
    )
    assert unknown.status_code == 404


async def test_deleting_a_synced_rule_deletes_it_at_livekit(connected: Org, livekit: Stub) -> None:
    made = await _setup(connected)
    await connected.sync()
    state: lk_stub.LiveKitState = livekit.state
    rule_id = made["rule"]["id"]

    state.outage = True
    failed = await connected.delete(f"/api/telephony/dispatch-rules/{rule_id}")
    assert failed.status_code == 502
    assert "LiveKit" in failed.json()["detail"] and "down for maintenance" in failed.json()["detail"]
    assert (await connected.get(f"/api/telephony/dispatch-rules/{rule_id}")).status_code == 200
    assert len(state.rules) == 1

    state.outage = False
    deleted = await connected.delete(f"/api/telephony/dispatch-rules/{rule_id}")
    assert deleted.status_code == 200 and deleted.json()["provider_deleted"] is True
    assert state.rules == {}
    assert (await connected.get(f"/api/telephony/dispatch-rules/{rule_id}")).status_code == 404


async def test_a_rule_already_gone_at_livekit_is_still_deleted(connected: Org, livekit: Stub) -> None:
    made = await _setup(connected)
    await connected.sync()
    livekit.state.rules.clear()
    deleted = await connected.delete(f"/api/telephony/dispatch-rules/{made['rule']['id']}")
    assert deleted.status_code == 200 and deleted.json()["provider_deleted"] is True


async def test_the_livekit_url_passes_the_outbound_guard(connected: Org, settings: object) -> None:
    await _setup(connected)
    settings.outbound_allowlist = []  # type: ignore[attr-defined]
    report = (await connected.sync()).json()
    assert report["created"] == [] and len(report["errors"]) == 3
    assert all("non-public address" in e["detail"] for e in report["errors"])


async def test_deleting_a_synced_trunk_deletes_it_at_livekit(connected: Org, livekit: Stub) -> None:
    made = await _setup(connected)
    await connected.sync()
    state: lk_stub.LiveKitState = livekit.state
    outbound_id = made["outbound"]["id"]
    livekit.state.fail_methods.add("DeleteSIPTrunk")
    failed = await connected.delete(f"/api/telephony/trunks/{outbound_id}")
    assert failed.status_code == 502 and len(state.outbound) == 1
    assert (await connected.get(f"/api/telephony/trunks/{outbound_id}")).status_code == 200
    livekit.state.fail_methods.clear()
    deleted = await connected.delete(f"/api/telephony/trunks/{outbound_id}")
    assert deleted.status_code == 200 and state.outbound == {}
    assert len(state.inbound) == 1


async def test_a_second_sync_while_one_talks_to_livekit_is_a_409(connected: Org, livekit: Stub) -> None:
    """The first sync holds no database transaction while it waits for LiveKit; the second one sees
    its committed lease and is refused."""
    import asyncio

    await _setup(connected)
    state: lk_stub.LiveKitState = livekit.state
    state.gate.clear()
    first = asyncio.create_task(connected.sync())
    while not state.calls:  # the first sync is now inside its first LiveKit call
        await asyncio.sleep(0.01)
    second = await connected.sync()
    assert second.status_code == 409 and "already running" in second.json()["detail"]
    state.gate.set()
    finished = await first
    assert finished.status_code == 200 and len(finished.json()["created"]) == 3
    assert (await connected.sync()).status_code == 200


async def test_the_twilio_sync_reads_every_page_of_numbers(connected: Org, twilio: Stub) -> None:
    twilio.state.max_page_size = 2
    for i in range(5):
        twilio.state.add_number(f"+493077700{i}")
    last = await connected.make("/api/telephony/numbers", {"number": "+4930777004", "provider": "twilio"})
    report = (await connected.sync()).json()
    assert [u["id"] for u in report["updated"]] == [last["id"]] and report["errors"] == []
    assert len(report["orphaned"]) == 4
