"""A finished campaign contact is a signed `campaign.contact.completed` call event, and campaign
contacts are part of a caller's export and deletion (the privacy requests)."""

from __future__ import annotations

import json
from urllib.parse import quote
from uuid import uuid4

from parley.kit.signing import verify
from tests.campaigns.conftest import Harness, contacts, make_campaign, upload_csv
from tests.notifications.conftest import Receiver, receiver  # noqa: F401  (fixture)
from tests.telephony.conftest import Org, Stub

SECRET = "whsec_campaign_events_0123456789"


async def test_a_completed_contact_is_announced_signed_once(
    harness: Harness,
    org: Org,
    twilio: Stub,
    receiver: Receiver,  # noqa: F811
) -> None:
    path = f"/hook/flaky/campaign-{uuid4().hex[:8]}"
    subscription = await org.make(
        "/api/webhooks/subscriptions",
        {"url": receiver.url + path, "event_types": ["campaign.contact.completed"], "secret": SECRET},
    )
    assert subscription["event_types"] == ["campaign.contact.completed"]
    campaign = await make_campaign(org, concurrency=1, max_attempts=1)
    cid = campaign["id"]
    assert (await upload_csv(org, cid, "phone,first_name\n+491704444444,Eva\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{cid}/start")).status_code == 200
    await harness.drain()
    call = twilio.state.calls[0]
    assert (await harness.deliver(twilio.state.finish(call["sid"], "completed"))).status_code == 204
    # A repeated status callback changes nothing and announces nothing again.
    assert (await harness.deliver(twilio.state.finish(call["sid"], "completed"))).status_code == 204

    received = receiver.at(path)
    assert len(received) == 1
    body = received[0].body
    headers = {k.lower(): v for k, v in received[0].headers.items()}
    assert headers["x-parley-event"] == "campaign.contact.completed"
    assert verify(SECRET, headers["x-parley-signature"], body)
    event = json.loads(body)
    data = event["data"]
    eva = (await contacts(org, cid))["+491704444444"]
    assert data["campaign_id"] == cid and data["contact_id"] == eva["id"]
    assert data["status"] == "completed" and data["attempts"] == 1 and data["call_id"] == eva["call_id"]
    assert data["phone"] == "+491704444444" and data["variables"] == {"first_name": "Eva"}


async def test_a_callers_export_and_deletion_include_campaign_contacts(
    harness: Harness, org: Org, twilio: Stub
) -> None:
    campaign = await make_campaign(org)
    cid = campaign["id"]
    text = "phone,first_name\n+491705555555,Jan\n+491706666666,Ida\n"
    assert (await upload_csv(org, cid, text)).status_code == 200
    await org.make("/api/campaigns/do-not-call", {"phone": "+491705555555"})

    caller = quote("+491705555555")
    exported = await org.get(f"/api/privacy/callers/{caller}/export")
    assert exported.status_code == 200, exported.text
    held = exported.json()["sources"]["campaign_contacts"]
    assert held[-1]["do_not_call"] is True
    assert [c["variables"] for c in held if "variables" in c] == [{"first_name": "Jan"}]

    deleted = await org.delete(f"/api/privacy/callers/{caller}")
    assert deleted.status_code == 200, deleted.text
    left = await contacts(org, cid)
    assert set(left) == {"+491706666666"}
    # The do-not-call entry stays: it exists because the person asked not to be called.
    dnc = (await org.get("/api/campaigns/do-not-call")).json()["items"]
    assert [d["phone"] for d in dnc] == ["+491705555555"]


async def test_a_campaign_call_is_outbound_on_its_record_and_its_call_events(
    harness: Harness,
    org: Org,
    twilio: Stub,
    receiver: Receiver,  # noqa: F811
) -> None:
    path = f"/hook/flaky/campaign-calls-{uuid4().hex[:8]}"
    await org.make(
        "/api/webhooks/subscriptions",
        {"url": receiver.url + path, "event_types": ["call.started", "call.ended"], "secret": SECRET},
    )
    campaign = await make_campaign(org, concurrency=1, max_attempts=1)
    cid = campaign["id"]
    assert (await upload_csv(org, cid, "phone,first_name\n+491707777777,Ole\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{cid}/start")).status_code == 200
    await harness.drain()
    call = twilio.state.calls[0]
    assert (await harness.deliver(twilio.state.finish(call["sid"], "completed"))).status_code == 204
    await harness.drain()

    session_id = (await contacts(org, cid))["+491707777777"]["call_id"]  # the call's session
    # the conversation ends (here through the API; on a real call when the media stream stops)
    assert (await org.post(f"/api/sessions/{session_id}/end")).status_code == 200
    await harness.drain()
    events = [json.loads(r.body) for r in receiver.at(path)]
    assert sorted(e["type"] for e in events) == ["call.ended", "call.started"]
    assert {e["data"]["direction"] for e in events} == {"outbound"}
    assert {e["data"]["callee"] for e in events} == {"+491707777777"}
    call_id = next(e["data"]["call_id"] for e in events if e["type"] == "call.ended")
    record = (await org.get(f"/api/calls/{call_id}")).json()
    assert record["direction"] == "outbound" and record["session_id"] == session_id
    outbound = (await org.get("/api/calls?direction=outbound")).json()["items"]
    inbound = (await org.get("/api/calls?direction=inbound")).json()["items"]
    assert call_id in {c["id"] for c in outbound}
    assert call_id not in {c["id"] for c in inbound}
    bad = await org.get("/api/calls?direction=sideways")
    assert bad.status_code == 422 and "direction" in bad.text
