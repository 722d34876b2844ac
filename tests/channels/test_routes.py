"""Channel routes over HTTP: CRUD, validation, tenancy, and which flow answers when (office hours)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from parley.channels.routing import is_open, resolve_flow
from tests.channels.conftest import BOB, Org, closed_flow, echo_flow

WEEKDAYS_9_17 = {day: [["09:00", "17:00"]] for day in ("mon", "tue", "wed", "thu", "fri")}


async def test_route_crud_and_the_spec_list(org: Org) -> None:
    flow = await org.flow(echo_flow())
    created = await org.route(
        channel_kind="phone", address="+49 (30) 123-4567", flow_id=flow, name="Zentrale"
    )
    assert created["address"] == "+49301234567" and created["flow_id"] == flow
    assert created["enabled"] is True and created["office_hours"] is None
    web = await org.route(channel_kind="web", address="homepage-widget", flow_id=flow)

    listed = await org.get("/api/channels/routes")
    assert listed.status_code == 200
    assert [r["id"] for r in listed.json()["items"]] == [web["id"], created["id"]]
    only_phone = await org.get("/api/channels/routes", channel_kind="phone")
    assert [r["id"] for r in only_phone.json()["items"]] == [created["id"]]
    by_flow = await org.get("/api/channels/routes", flow_id=flow, limit=1)
    assert len(by_flow.json()["items"]) == 1 and by_flow.json()["next_cursor"]
    rest = await org.get("/api/channels/routes", flow_id=flow, limit=1, cursor=by_flow.json()["next_cursor"])
    assert [r["id"] for r in rest.json()["items"]] == [created["id"]]
    by_address = await org.get("/api/channels/routes", address="+49 30 1234567")
    assert [r["id"] for r in by_address.json()["items"]] == [created["id"]]
    assert (await org.get("/api/channels/routes", channel_kind="fax")).status_code == 422

    other = await org.flow(closed_flow(), name="Closed")
    patched = await org.patch(
        f"/api/channels/routes/{created['id']}",
        {"fallback_flow_id": other, "office_hours": {"timezone": "Europe/Berlin", "weekly": WEEKDAYS_9_17}},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["fallback_flow_id"] == other
    assert patched.json()["office_hours"]["weekly"]["mon"] == [["09:00", "17:00"]]
    cleared = await org.patch(f"/api/channels/routes/{created['id']}", {"office_hours": None})
    assert cleared.json()["office_hours"] is None and cleared.json()["fallback_flow_id"] == other

    fetched = await org.get(f"/api/channels/routes/{created['id']}")
    assert fetched.status_code == 200 and fetched.json()["name"] == "Zentrale"
    deleted = await org.delete(f"/api/channels/routes/{created['id']}")
    assert deleted.json() == {"id": created["id"], "deleted": True}
    assert (await org.get(f"/api/channels/routes/{created['id']}")).status_code == 404


async def test_one_route_per_address_and_only_own_flows(org: Org, make_org: Any) -> None:
    flow = await org.flow(echo_flow())
    await org.route(channel_kind="phone", address="+4930555000", flow_id=flow)
    again = await org.post(
        "/api/channels/routes", {"channel_kind": "phone", "address": "+49 30 555000", "flow_id": flow}
    )
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    # The same number on another channel kind is another route.
    assert (
        await org.post("/api/channels/routes", {"channel_kind": "web", "address": "x1", "flow_id": flow})
    ).status_code == 200

    bob = await make_org(BOB, "Bobs Garage")
    bobs_flow = await bob.flow(echo_flow())
    foreign = await org.post(
        "/api/channels/routes", {"channel_kind": "phone", "address": "+4930555001", "flow_id": bobs_flow}
    )
    assert foreign.status_code == 404
    foreign_fallback = await org.post(
        "/api/channels/routes",
        {"channel_kind": "phone", "address": "+4930555001", "flow_id": flow, "fallback_flow_id": bobs_flow},
    )
    assert foreign_fallback.status_code == 404
    bobs_account = await bob.account()
    foreign_account = await org.post(
        "/api/channels/routes", {"channel_kind": "whatsapp", "address": bobs_account["id"], "flow_id": flow}
    )
    assert foreign_account.status_code == 404
    # Bob does not see, and cannot change, the organization's routes; the same number is free for him.
    assert (await bob.get("/api/channels/routes")).json()["items"] == []
    await bob.route(channel_kind="phone", address="+4930555000", flow_id=bobs_flow)
    mine = (await org.get("/api/channels/routes", channel_kind="phone")).json()["items"][0]
    assert (await bob.patch(f"/api/channels/routes/{mine['id']}", {"enabled": False})).status_code == 404
    assert (await bob.delete(f"/api/channels/routes/{mine['id']}")).status_code == 404


async def test_bad_routes_are_refused_with_reasons(org: Org) -> None:
    flow = await org.flow(echo_flow())
    cases: list[tuple[dict[str, Any], str]] = [
        ({"channel_kind": "phone", "address": "030 1234"}, "E.164"),
        ({"channel_kind": "whatsapp", "address": "+4930123456"}, "WhatsApp account id"),
        ({"channel_kind": "web", "address": "has space"}, "widget key"),
        (
            {
                "channel_kind": "phone",
                "address": "+4930123456",
                "office_hours": {"timezone": "Mars/Olympus", "weekly": {}},
            },
            "IANA",
        ),
        (
            {
                "channel_kind": "phone",
                "address": "+4930123456",
                "office_hours": {"timezone": "UTC", "weekly": {"mon": [["17:00", "09:00"]]}},
            },
            "overnight",
        ),
        (
            {
                "channel_kind": "phone",
                "address": "+4930123456",
                "office_hours": {
                    "timezone": "UTC",
                    "weekly": {"mon": [["09:00", "13:00"], ["12:00", "17:00"]]},
                },
            },
            "overlap",
        ),
        (
            {
                "channel_kind": "phone",
                "address": "+4930123456",
                "office_hours": {"timezone": "UTC", "weekly": {"mon": [["9:00", "17:00"]]}},
            },
            "pattern",
        ),
        (
            {
                "channel_kind": "phone",
                "address": "+4930123456",
                "office_hours": {"timezone": "UTC", "weekly": {"moon": [["09:00", "17:00"]]}},
            },
            "mon",
        ),
    ]
    for body, fragment in cases:
        response = await org.post("/api/channels/routes", {"flow_id": flow, **body})
        assert response.status_code == 422, (body, response.text)
        assert fragment in response.text, (fragment, response.text)
    route = await org.route(channel_kind="phone", address="+4930123456", flow_id=flow)
    bad_patch = await org.patch(f"/api/channels/routes/{route['id']}", {"address": "nope"})
    assert bad_patch.status_code == 400 and "E.164" in bad_patch.json()["detail"]
    assert (await org.patch(f"/api/channels/routes/{route['id']}", {"flow_id": None})).status_code == 400
    assert (
        await org.patch(f"/api/channels/routes/{route['id']}", {"channel_kind": "web"})
    ).status_code == 422
    assert (await org.get("/api/channels/routes", cursor="garbage!")).status_code == 400


async def test_deleting_flows_removes_routes_and_clears_fallbacks(org: Org) -> None:
    flow = await org.flow(echo_flow())
    fallback = await org.flow(closed_flow(), name="Closed")
    route = await org.route(channel_kind="web", address="w1", flow_id=flow, fallback_flow_id=fallback)
    assert (await org.delete(f"/api/flows/{fallback}")).status_code == 200
    assert (await org.get(f"/api/channels/routes/{route['id']}")).json()["fallback_flow_id"] is None
    assert (await org.delete(f"/api/flows/{flow}")).status_code == 200
    assert (await org.get(f"/api/channels/routes/{route['id']}")).status_code == 404


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_office_hours_follow_the_local_clock_across_dst() -> None:
    berlin = {"timezone": "Europe/Berlin", "weekly": WEEKDAYS_9_17}
    # 07:30 UTC on a Monday is 08:30 in winter (CET) but 09:30 in summer (CEST, from 29 March 2026).
    assert not is_open(berlin, at("2026-03-23T07:30:00+00:00"))
    assert is_open(berlin, at("2026-03-30T07:30:00+00:00"))
    # 15:30 UTC is 16:30 in winter (open) but 17:30 in summer (closed).
    assert is_open(berlin, at("2026-03-23T15:30:00+00:00"))
    assert not is_open(berlin, at("2026-03-30T15:30:00+00:00"))
    # The DST weekend itself: Sunday is closed whatever the clock does.
    assert not is_open(berlin, at("2026-03-29T10:00:00+00:00"))

    new_york = {"timezone": "America/New_York", "weekly": {"mon": [["09:00", "17:00"]]}}
    assert not is_open(new_york, at("2026-03-02T13:30:00+00:00"))  # 08:30 EST
    assert is_open(new_york, at("2026-03-09T13:30:00+00:00"))  # 09:30 EDT (DST from 8 March)
    assert is_open(new_york, at("2026-11-02T14:30:00+00:00"))  # 09:30 EST again (DST ended 1 Nov)
    assert not is_open(new_york, at("2026-11-02T13:30:00+00:00"))  # 08:30 EST
    # The same instant is open in one office and closed in the other.
    moment = at("2026-03-10T15:00:00+00:00")  # Tuesday: 16:00 Berlin, 11:00 New York
    assert is_open(berlin, moment) and not is_open(new_york, moment)


def test_holidays_are_local_dates_and_midnight_windows() -> None:
    tokyo = {
        "timezone": "Asia/Tokyo",
        "weekly": {"thu": [["00:00", "24:00"]], "wed": [["20:00", "24:00"]]},
        "holidays": ["2026-12-24"],
    }
    # 16:00 UTC on Wednesday 23 December is 01:00 on Thursday 24 December in Tokyo: a holiday.
    assert not is_open(tokyo, at("2026-12-23T16:00:00+00:00"))
    # 14:59 UTC is 23:59 on the Wednesday: inside the window that ends at midnight.
    assert is_open(tokyo, at("2026-12-23T14:59:00+00:00"))
    # A week later the Thursday is a normal working day.
    assert is_open(tokyo, at("2026-12-30T16:00:00+00:00"))
    # A naive moment counts as UTC; no office hours means always open.
    assert not is_open(tokyo, datetime(2026, 12, 23, 16, 0))
    assert is_open(None, datetime.now(UTC))


async def test_resolve_flow_applies_hours_and_fallback(org: Org, db_session: AsyncSession) -> None:
    day = await org.flow(echo_flow(), name="Day")
    night = await org.flow(closed_flow(), name="Night")
    hours = {"timezone": "America/Los_Angeles", "weekly": WEEKDAYS_9_17, "holidays": ["2026-07-03"]}
    with_fallback = await org.route(
        channel_kind="phone", address="+14155550100", flow_id=day, fallback_flow_id=night, office_hours=hours
    )
    await org.route(channel_kind="phone", address="+14155550101", flow_id=day, office_hours=hours)

    async def flow_at(address: str, moment: str) -> str | None:
        return await resolve_flow(db_session, org.id, kind="phone", address=address, at=at(moment))

    assert await flow_at("+1 415 555 0100", "2026-07-06T17:00:00+00:00") == day  # Mon 10:00 PDT
    assert await flow_at("+14155550100", "2026-07-06T15:00:00+00:00") == night  # Mon 08:00 PDT
    assert await flow_at("+14155550100", "2026-07-03T17:00:00+00:00") == night  # holiday
    assert await flow_at("+14155550101", "2026-07-06T15:00:00+00:00") is None  # closed, no fallback
    assert await flow_at("+14155550199", "2026-07-06T17:00:00+00:00") is None  # no route
    assert await resolve_flow(db_session, "org_someone_else", kind="phone", address="+14155550100") is None

    resolved = await org.get(
        "/api/channels/routes/resolve",
        channel_kind="phone",
        address="+1 (415) 555-0100",
        at="2026-12-07T16:59:00Z",  # Monday 08:59 PST
    )
    assert resolved.status_code == 200
    assert resolved.json()["route_id"] == with_fallback["id"]
    assert (resolved.json()["open"], resolved.json()["flow_id"]) == (False, night)
    assert (
        await org.get("/api/channels/routes/resolve", channel_kind="phone", address="+1", at="yesterday")
    ).status_code == 422

    for extreme in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        far = await org.get(
            "/api/channels/routes/resolve", channel_kind="phone", address="+14155550100", at=extreme
        )
        assert far.status_code == 400, far.text

    await org.patch(f"/api/channels/routes/{with_fallback['id']}", {"enabled": False})
    assert await flow_at("+14155550100", "2026-07-06T17:00:00+00:00") is None
