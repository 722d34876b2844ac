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
