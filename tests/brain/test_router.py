from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from tests.calls.conftest import Recorder
from tests.calls.helpers import START, flow_signal, order_lookup
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, create_org

BOB = make_token("bob", name="Bob")
VIEWER = make_token("victor", name="Victor")
ANGRY = (("agent", "Guten Tag"), ("caller", "Ich bin verärgert, rufen Sie mich zurück!"))


async def _signals(client: httpx.AsyncClient, org: str, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/api/brain/signals", params=params, headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_signals_list_with_filters(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    angry = await record(org, lines=ANGRY, signals=[flow_signal("vip_customer", "high")])
    failing = await record(
        org,
        started_at=START + timedelta(hours=1),
        flow_id="flow_01OTHER",
        tool_calls=[order_lookup(status="timeout", http_status=None, result={})],
    )
    everything = await _signals(client, org)
    assert sorted(s["type"] for s in everything) == [
        "callback_requested",
        "negative_sentiment",
        "tool_failure",
        "vip_customer",
    ]
    assert all(s["status"] == "open" for s in everything)
    vip = next(s for s in everything if s["type"] == "vip_customer")
    assert (vip["source"], vip["severity"], vip["call_id"]) == ("flow", "high", angry.id)
    assert vip["details"] == {"reason": "flagged by flow"}

    assert [s["type"] for s in await _signals(client, org, call_id=failing.id)] == ["tool_failure"]
    assert [s["type"] for s in await _signals(client, org, flow_id="flow_01OTHER")] == ["tool_failure"]
    assert [s["type"] for s in await _signals(client, org, severity="high")] == [
        "tool_failure",
        "vip_customer",
    ]
    assert [s["call_id"] for s in await _signals(client, org, type="callback_requested")] == [angry.id]
    assert len(await _signals(client, org, status="open")) == 4
    assert await _signals(client, org, status="resolved") == []
    assert len(await _signals(client, org, since="2020-01-01T00:00:00Z")) == 4
    assert await _signals(client, org, until="2020-01-01T00:00:00Z") == []

    paged = await client.get("/api/brain/signals", params={"limit": 3}, headers=auth(ALICE, org))
    assert len(paged.json()["items"]) == 3 and paged.json()["next_cursor"]

    bad = await client.get("/api/brain/signals", params={"severity": "warning"}, headers=auth(ALICE, org))
    assert bad.status_code == 422


async def test_acknowledge_then_resolve(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    await record(org, lines=ANGRY)
    signal = (await _signals(client, org, type="negative_sentiment"))[0]
    path = f"/api/brain/signals/{signal['id']}"

    acked = await client.patch(path, json={"status": "acknowledged"}, headers=auth(ALICE, org))
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "acknowledged" and acked.json()["acknowledged_at"]
    assert acked.json()["acknowledged_by"].startswith("usr_")

    again = await client.patch(path, json={"status": "acknowledged"}, headers=auth(ALICE, org))
    assert again.status_code == 409

    resolved = await client.patch(
        path, json={"status": "resolved", "note": "Called the customer back."}, headers=auth(ALICE, org)
    )
    assert resolved.status_code == 200
    body = resolved.json()
    assert (body["status"], body["note"]) == ("resolved", "Called the customer back.")
    assert body["resolved_at"] and body["acknowledged_at"]

    back = await client.patch(path, json={"status": "acknowledged"}, headers=auth(ALICE, org))
    assert back.status_code == 409
    assert "resolved" in back.json()["detail"]
    assert (await client.get(path, headers=auth(ALICE, org))).json()["status"] == "resolved"
    assert [s["id"] for s in await _signals(client, org, status="resolved")] == [signal["id"]]

    events = await client.get(
        "/api/audit/events", params={"action": "update_brain_signal"}, headers=auth(ALICE, org)
    )
    assert [e["resource_id"] for e in events.json()["items"]] == [signal["id"], signal["id"]]


async def test_open_signals_resolve_directly_and_bad_bodies_are_422(
    client: httpx.AsyncClient, record: Recorder
) -> None:
    org = str((await create_org(client))["id"])
    await record(org, lines=ANGRY)
    signal = (await _signals(client, org))[0]
    path = f"/api/brain/signals/{signal['id']}"
    for body in ({"status": "open"}, {"status": "resolved", "organization_id": "x"}, {}):
        assert (await client.patch(path, json=body, headers=auth(ALICE, org))).status_code == 422
    form = await client.patch(path, data={"status": "resolved"}, headers=auth(ALICE, org))
    assert form.status_code == 200 and form.json()["status"] == "resolved"


async def test_viewers_read_but_do_not_patch(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    added = await client.post(
        f"/api/organizations/{org}/members", json={"subject": "victor", "role": "viewer"}, headers=auth(ALICE)
    )
    assert added.status_code == 200
    await record(org, lines=ANGRY)
    listed = await client.get("/api/brain/signals", headers=auth(VIEWER, org))
    assert listed.status_code == 200
    signal_id = listed.json()["items"][0]["id"]
    assert (await client.get(f"/api/brain/signals/{signal_id}", headers=auth(VIEWER, org))).status_code == 200
    denied = await client.patch(
        f"/api/brain/signals/{signal_id}", json={"status": "acknowledged"}, headers=auth(VIEWER, org)
    )
    assert denied.status_code == 403


async def test_another_organizations_signals_are_404(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    theirs = str((await create_org(client, BOB, name="Bob's Garage"))["id"])
    await record(theirs, lines=ANGRY)
    their_signal = (await client.get("/api/brain/signals", headers=auth(BOB, theirs))).json()["items"][0]
    path = f"/api/brain/signals/{their_signal['id']}"
    assert (await client.get(path, headers=auth(ALICE, org))).status_code == 404
    patched = await client.patch(path, json={"status": "resolved"}, headers=auth(ALICE, org))
    assert patched.status_code == 404
    assert await _signals(client, org) == []
    assert (await client.get(path, headers=auth(BOB, theirs))).json()["status"] == "open"
