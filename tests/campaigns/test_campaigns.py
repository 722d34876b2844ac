"""Campaigns end to end against the local Twilio server: uploads, windows, retries, do-not-call,
voicemail, pause/resume/cancel, a worker killed mid-campaign, tenant isolation."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import update

from parley.campaigns import service as campaigns_service
from parley.campaigns.models import Campaign, CampaignContact
from parley.kit.db import Database, unit_of_work
from parley.kit.errors import Conflict
from parley.sessions.models import ConversationSession
from tests.campaigns.conftest import ALWAYS, CALLER_ID, Harness, contacts, make_campaign, upload_csv
from tests.organizations.test_router import BOB
from tests.telephony.conftest import Org, Stub, new_org

BOM = "\ufeff"


async def test_csv_with_bom_semicolons_and_quotes_is_read(org: Org) -> None:
    campaign = await make_campaign(org)
    text = (
        BOM + 'Telefon;Vorname;Notiz\r\n+49 170 1111111;Jörg;"Termin; bitte ""morgen"""\r\n'
        '+491702222222;Anna;"zwei\nZeilen"\r\n'
    )
    response = await upload_csv(org, campaign["id"], text)
    assert response.status_code == 200, response.text
    assert response.json() == {"accepted": 2, "total_contacts": 2}
    found = await contacts(org, campaign["id"])
    assert found["+491701111111"]["variables"] == {"vorname": "Jörg", "notiz": 'Termin; bitte "morgen"'}
    assert found["+491702222222"]["variables"]["notiz"] == "zwei\nZeilen"
    assert {c["status"] for c in found.values()} == {"pending"}

    json_upload = await org.post(
        f"/api/campaigns/{campaign['id']}/contacts", [{"phone": "+491703333333", "variables": {"kunde": 7}}]
    )
    assert json_upload.status_code == 200 and json_upload.json()["total_contacts"] == 3


async def test_bad_rows_refuse_the_whole_upload_with_row_numbers(org: Org) -> None:
    campaign = await make_campaign(org)
    text = (
        "phone,name\n+491701111111,A\n0170 123,B\n+491701111111,C\n+491704444444,D,extra\n+491705555555,E\n"
    )
    response = await upload_csv(org, campaign["id"], text)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert [e["loc"] for e in errors] == [["body", "row", 2], ["body", "row", 3], ["body", "row", 4]]
    assert "E.164" in errors[0]["msg"] and "duplicate" in errors[1]["msg"] and "fields" in errors[2]["msg"]
    assert await contacts(org, campaign["id"]) == {}  # nothing half-written

    no_phone = await upload_csv(org, campaign["id"], "name;city\nA;B\n")
    assert no_phone.status_code == 422 and "no phone column" in no_phone.json()["detail"][0]["msg"]
    wrong_type = await org.client.post(
        f"/api/campaigns/{campaign['id']}/contacts",
        content=b"x",
        headers={**org.headers, "Content-Type": "text/xml"},
    )
    assert wrong_type.status_code == 415
    # a header field over the csv module's field limit (128 KiB) is a 422, not a 500
    huge_header = await upload_csv(org, campaign["id"], "phone;" + "x" * 200_000 + "\n+491701111111;1\n")
    assert huge_header.status_code == 422, huge_header.text
    assert "header cannot be read" in huge_header.json()["detail"][0]["msg"]

    # a number already in the campaign is a duplicate in a later upload too
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    again = await upload_csv(org, campaign["id"], "phone\n+491706666666\n+49 170 1111111\n")
    assert again.status_code == 422 and again.json()["detail"][0]["loc"] == ["body", "row", 2]
    assert list(await contacts(org, campaign["id"])) == ["+491701111111"]


async def test_a_window_that_never_opens_and_bad_references_are_refused(org: Org) -> None:
    base = {"name": "X", "flow_id": org.flow_id, "caller_id": CALLER_ID}
    for windows in (
        [],
        [{"weekdays": [], "start": "09:00", "end": "18:00"}],
        [{"weekdays": [1], "start": "18:00", "end": "09:00"}],
        [{"weekdays": [8], "start": "09:00", "end": "18:00"}],
        [{"weekdays": [1], "start": "9 Uhr", "end": "18:00"}],
    ):
        response = await org.post("/api/campaigns", {**base, "windows": windows})
        assert response.status_code == 422, (windows, response.text)
    assert (await org.post("/api/campaigns", {**base, "voicemail": "leave_message"})).status_code == 422
    assert (await org.post("/api/campaigns", {**base, "caller_id": "+4930111111"})).status_code == 404
    assert (await org.post("/api/campaigns", {**base, "flow_id": "flow_nope"})).status_code == 404
    empty = await org.make("/api/campaigns", base)
    assert (await org.post(f"/api/campaigns/{empty['id']}/start")).status_code == 409


async def test_campaign_calls_retries_skips_do_not_call_and_completes(
    harness: Harness, org: Org, twilio: Stub
) -> None:
    campaign = await make_campaign(org, concurrency=2, max_attempts=2, retry_backoff_minutes=30)
    cid = campaign["id"]
    dnc = await org.make("/api/campaigns/do-not-call", {"phone": "+49 170 2222222", "note": "asked"})
    assert dnc["phone"] == "+491702222222"
    text = "phone,first_name\n+491701111111,Jörg\n+491702222222,Nein\n+491703333333,Anna\n"
    assert (await upload_csv(org, cid, text)).status_code == 200

    started = await org.post(f"/api/campaigns/{cid}/start")
    assert started.status_code == 200 and started.json()["status"] == "running"
    await harness.drain()

    assert [c["To"] for c in twilio.state.calls] == ["+491701111111", "+491703333333"]
    first = twilio.state.calls[0]
    assert first["From"] == CALLER_ID and "<Connect><Stream" in first["Twiml"]
    assert first["MachineDetection"] == "DetectMessageEnd" and first["AsyncAmd"] == "true"
    assert first["StatusCallback"].startswith("https://parley.example/api/campaigns/twilio/status?contact=")
    found = await contacts(org, cid)
    assert found["+491702222222"]["status"] == "do_not_call" and found["+491702222222"]["attempts"] == 0
    joerg = found["+491701111111"]
    assert (
        joerg["status"] == "in_call" and joerg["attempts"] == 1 and joerg["provider_call_id"] == first["sid"]
    )
    session = (await org.get(f"/api/sessions/{joerg['call_id']}")).json()
    assert session["variables"]["first_name"] == "Jörg" and session["callee"] == "+491701111111"

    # busy → a retry after the backoff; answered → completed
    assert (await harness.deliver(twilio.state.finish(first["sid"], "busy"))).status_code == 204
    second = twilio.state.calls[1]
    assert (await harness.deliver(twilio.state.finish(second["sid"], "completed"))).status_code == 204
    found = await contacts(org, cid)
    assert found["+491701111111"]["status"] == "busy" and found["+491701111111"]["next_attempt_at"]
    assert found["+491703333333"]["status"] == "completed"
    assert len(twilio.state.calls) == 2  # the retry waits for its backoff

    # a repeated callback changes nothing
    assert (await harness.deliver(twilio.state.finish(second["sid"], "completed"))).status_code == 204

    await _due_now(harness, cid)
    await harness.nudge(cid)
    assert [c["To"] for c in twilio.state.calls][2:] == ["+491701111111"]
    retry = twilio.state.calls[2]
    await harness.deliver(twilio.state.finish(retry["sid"], "no-answer"))
    found = await contacts(org, cid)
    joerg = found["+491701111111"]
    assert joerg["status"] == "no_answer" and joerg["attempts"] == 2 and joerg["next_attempt_at"] is None

    done = (await org.get(f"/api/campaigns/{cid}")).json()
    assert done["status"] == "completed" and done["contacts"]["completed"] == 1
    assert done["contacts"]["no_answer"] == 1 and done["contacts"]["do_not_call"] == 1

    export = await org.get(f"/api/campaigns/{cid}/contacts/export")
    assert export.status_code == 200 and export.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(export.content.decode("utf-8-sig"))))
    assert {r["phone"]: r["status"] for r in rows} == {
        "+491701111111": "no_answer",
        "+491702222222": "do_not_call",
        "+491703333333": "completed",
    }
    filtered = await org.get(f"/api/campaigns/{cid}/contacts?status=completed")
    assert [c["phone"] for c in filtered.json()["items"]] == ["+491703333333"]


async def _due_now(harness: Harness, campaign_id: str) -> None:
    """Let the retry backoff pass (the clock is the database's: move the due time back)."""
    async with harness.app.state.db.sessionmaker() as session:
        await session.execute(
            update(CampaignContact)
            .where(CampaignContact.campaign_id == campaign_id, CampaignContact.next_attempt_at.is_not(None))
            .values(next_attempt_at=datetime.now(UTC) - timedelta(seconds=1))
        )
        await session.commit()


async def test_outside_the_window_nobody_is_called(harness: Harness, org: Org, twilio: Stub) -> None:
    today = datetime.now(ZoneInfo("Europe/Berlin")).date()
    campaign = await make_campaign(org, holidays=[today.isoformat()])
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    assert twilio.state.calls == []
    assert (await contacts(org, campaign["id"]))["+491701111111"]["status"] == "pending"

    # the organization's time zone decides: a window that is over there is closed
    other_day = (today.isoweekday() % 7) + 1
    closed = await make_campaign(org, windows=[{"weekdays": [other_day], "start": "00:00", "end": "24:00"}])
    assert (await upload_csv(org, closed["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{closed['id']}/start")).status_code == 200
    await harness.drain()
    assert twilio.state.calls == []


async def test_pause_resume_and_cancel(harness: Harness, org: Org, twilio: Stub) -> None:
    campaign = await make_campaign(org, concurrency=1)
    cid = campaign["id"]
    assert (await upload_csv(org, cid, "phone\n+491701111111\n+491702222222\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{cid}/start")).status_code == 200
    paused = await org.post(f"/api/campaigns/{cid}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    await harness.drain()
    assert twilio.state.calls == []
    assert (await org.post(f"/api/campaigns/{cid}/pause")).status_code == 409

    assert (await org.post(f"/api/campaigns/{cid}/resume")).json()["status"] == "running"
    await harness.drain()
    assert [c["To"] for c in twilio.state.calls] == ["+491701111111"]  # concurrency 1

    cancelled = await org.post(f"/api/campaigns/{cid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    await harness.deliver(twilio.state.finish(twilio.state.calls[0]["sid"], "busy"))
    found = await contacts(org, cid)
    assert found["+491702222222"]["status"] == "cancelled"
    assert found["+491701111111"]["status"] == "busy" and found["+491701111111"]["next_attempt_at"] is None
    await harness.nudge(cid)
    assert len(twilio.state.calls) == 1
    assert (await org.post(f"/api/campaigns/{cid}/resume")).status_code == 409


async def test_answering_machine_hears_the_message(harness: Harness, org: Org, twilio: Stub) -> None:
    campaign = await make_campaign(
        org, voicemail="leave_message", voicemail_message="Hier ist Autohaus Demo, bitte rufen Sie zurück."
    )
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    (call,) = twilio.state.calls
    assert (
        await harness.deliver(twilio.state.answered_by(call["sid"], "machine_end_beep"))
    ).status_code == 204
    (redirect,) = twilio.state.updates
    assert redirect["sid"] == call["sid"] and "<Say>Hier ist Autohaus Demo" in redirect["Twiml"]
    await harness.deliver(twilio.state.finish(call["sid"], "completed"))
    contact = (await contacts(org, campaign["id"]))["+491701111111"]
    assert contact["status"] == "voicemail" and contact["answered_by"] == "machine_end_beep"


async def test_hang_up_on_a_machine(harness: Harness, org: Org, twilio: Stub) -> None:
    campaign = await make_campaign(org, voicemail="hang_up")
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    (call,) = twilio.state.calls
    await harness.deliver(twilio.state.answered_by(call["sid"], "machine_start"))
    (hangup,) = twilio.state.updates
    assert hangup["Status"] == "completed"


async def test_forged_callbacks_are_refused(harness: Harness, org: Org, twilio: Stub) -> None:
    campaign = await make_campaign(org)
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    (call,) = twilio.state.calls
    callback = twilio.state.finish(call["sid"], "busy")
    assert callback is not None
    path = callback.url.removeprefix("https://parley.example")
    forged = await harness.client.post(
        path, data=callback.params, headers={**callback.headers, "X-Twilio-Signature": "AAAA"}
    )
    assert forged.status_code == 403
    unsigned = await harness.client.post(path, data=callback.params)
    assert unsigned.status_code == 403
    assert (await contacts(org, campaign["id"]))["+491701111111"]["status"] == "in_call"


async def test_a_worker_killed_mid_campaign_calls_nobody_twice(
    settings: object, database: Database, harness: Harness, org: Org, twilio: Stub
) -> None:
    from parley.app import create_app

    campaign = await make_campaign(org, concurrency=1)
    cid = campaign["id"]
    numbers = ["+491701111111", "+491702222222", "+491703333333"]
    assert (await upload_csv(org, cid, "phone\n" + "\n".join(numbers) + "\n")).status_code == 200
    twilio.state.hold = threading.Event()  # Twilio places the call but its answer never arrives
    assert (await org.post(f"/api/campaigns/{cid}/start")).status_code == 200
    worker = asyncio.create_task(harness.drain())
    assert await asyncio.to_thread(twilio.state.placed.wait, 60)
    worker.cancel()  # the worker dies while Twilio is dialing
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    twilio.state.hold.set()
    twilio.state.hold = None
    assert [c["To"] for c in twilio.state.calls] == [numbers[0]]

    # A new worker starts: recovery finds the running campaign; the claimed contact is in flight.
    restarted = create_app(settings, database=database)  # type: ignore[arg-type]
    assert await restarted.state.jobs.recover() >= 1
    await restarted.state.jobs.drain(60)
    assert len(twilio.state.calls) == 1
    # The dead round's lease and the claim's lease run out.
    past = datetime.now(UTC) - timedelta(seconds=1)
    async with database.sessionmaker() as session:
        await session.execute(update(Campaign).where(Campaign.id == cid).values(tick_until=past))
        await session.execute(
            update(CampaignContact).where(CampaignContact.campaign_id == cid).values(lease_until=past)
        )
        await session.commit()
    await restarted.state.jobs.submit("campaigns.tick", {"campaign_id": cid})
    await restarted.state.jobs.drain(60)
    found = await contacts(org, cid)
    assert found[numbers[0]]["status"] == "failed" and found[numbers[0]]["last_result"] == "interrupted"
    assert [c["To"] for c in twilio.state.calls] == numbers[:2]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=restarted), base_url="http://parley.test"
    ) as client:
        again = Harness(restarted, client)
        await again.deliver(twilio.state.finish(twilio.state.calls[1]["sid"], "completed"))
        await again.deliver(twilio.state.finish(twilio.state.calls[2]["sid"], "completed"))
    tos = [c["To"] for c in twilio.state.calls]
    assert sorted(tos) == sorted(numbers) and len(set(tos)) == len(tos)  # 0 duplicate dials
    assert (await org.get(f"/api/campaigns/{cid}")).json()["status"] == "completed"


async def test_another_organization_sees_nothing(harness: Harness, org: Org) -> None:
    campaign = await make_campaign(org)
    entry = await org.make("/api/campaigns/do-not-call", {"phone": "+491709999999"})
    other = await new_org(harness.client, BOB, "Other GmbH")
    for path in (
        f"/api/campaigns/{campaign['id']}",
        f"/api/campaigns/{campaign['id']}/contacts",
        f"/api/campaigns/{campaign['id']}/contacts/export",
    ):
        assert (await other.get(path)).status_code == 404, path
    assert (await other.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 404
    upload = await other.client.post(
        f"/api/campaigns/{campaign['id']}/contacts",
        content=b"phone\n+491701111111\n",
        headers={**other.headers, "Content-Type": "text/csv"},
    )
    assert upload.status_code == 404
    assert (await other.delete(f"/api/campaigns/do-not-call/{entry['id']}")).status_code == 404
    assert (await other.get("/api/campaigns/do-not-call")).json()["items"] == []
    assert (await other.get("/api/campaigns")).json()["items"] == []


async def test_do_not_call_bulk_and_removal(org: Org) -> None:
    bad = await org.post("/api/campaigns/do-not-call/bulk", {"phones": ["+491701111111", "nope"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "phones", 1]
    assert (await org.get("/api/campaigns/do-not-call")).json()["items"] == []
    added = await org.post(
        "/api/campaigns/do-not-call/bulk", {"phones": ["+491701111111", "+49 170 2222222"]}
    )
    assert added.json() == {"added": 2, "already_listed": 0}
    again = await org.post("/api/campaigns/do-not-call/bulk", {"phones": ["+491701111111"]})
    assert again.json() == {"added": 0, "already_listed": 1}
    listed = (await org.get("/api/campaigns/do-not-call?phone=%2B491702222222")).json()["items"]
    assert [e["phone"] for e in listed] == ["+491702222222"]
    assert (await org.post("/api/campaigns/do-not-call", {"phone": "+491701111111"})).status_code == 409
    assert (await org.delete(f"/api/campaigns/do-not-call/{listed[0]['id']}")).status_code == 200
    assert len((await org.get("/api/campaigns/do-not-call")).json()["items"]) == 1


async def test_campaign_dials_through_livekit(harness: Harness, org: Org, livekit: Stub) -> None:
    from tests.stubs import livekit as lk_stub

    await org.configure(
        "livekit", {"url": livekit.url, "api_key": lk_stub.API_KEY, "api_secret": lk_stub.API_SECRET}
    )
    await org.make("/api/telephony/numbers", {"number": "+4930888000", "provider": "livekit"})
    await org.make(
        "/api/telephony/trunks",
        {
            "name": "Out",
            "direction": "outbound",
            "numbers": ["+4930888000"],
            "address": "sip.carrier.example",
        },
    )
    assert (await org.sync()).status_code == 200
    campaign = await org.make(
        "/api/campaigns",
        {"name": "LK", "flow_id": org.flow_id, "caller_id": "+4930888000", "windows": ALWAYS},
    )
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    (participant,) = livekit.state.participants
    assert participant.sip_call_to == "+491701111111" and participant.sip_number == "+4930888000"
    contact = (await contacts(org, campaign["id"]))["+491701111111"]
    assert contact["status"] == "in_call" and participant.room_name == f"parley-{contact['call_id']}"
    assert (await org.get(f"/api/campaigns/{campaign['id']}")).json()["status"] == "running"
    # the call's session ends (the caller hangs up): the next round records the result
    assert (await org.post(f"/api/sessions/{contact['call_id']}/end")).status_code == 200
    await harness.nudge(campaign["id"])
    contact = (await contacts(org, campaign["id"]))["+491701111111"]
    assert contact["status"] == "completed" and contact["last_result"].startswith("session_")
    assert (await org.get(f"/api/campaigns/{campaign['id']}")).json()["status"] == "completed"


async def test_a_lost_status_callback_is_made_up_for_by_the_sessions_end(
    harness: Harness, org: Org, twilio: Stub
) -> None:
    campaign = await make_campaign(org, concurrency=2)
    assert (await upload_csv(org, campaign["id"], "phone\n+491701111111\n+491702222222\n")).status_code == 200
    assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
    await harness.drain()
    found = await contacts(org, campaign["id"])
    ended, silent = found["+491701111111"], found["+491702222222"]
    assert ended["status"] == silent["status"] == "in_call"
    assert (await org.post(f"/api/sessions/{ended['call_id']}/end")).status_code == 200
    await harness.nudge(campaign["id"])
    assert (await contacts(org, campaign["id"]))["+491701111111"]["status"] == "in_call"  # within the grace
    long_ago = datetime.now(UTC) - timedelta(hours=5)
    async with harness.app.state.db.sessionmaker() as session:
        await session.execute(
            update(ConversationSession)
            .where(ConversationSession.id == ended["call_id"])
            .values(ended_at=long_ago)
        )
        await session.execute(
            update(CampaignContact).where(CampaignContact.id == silent["id"]).values(last_attempt_at=long_ago)
        )
        await session.commit()
    await harness.nudge(campaign["id"])
    found = await contacts(org, campaign["id"])
    assert found["+491701111111"]["status"] == "completed"
    assert (
        found["+491702222222"]["status"] == "failed" and found["+491702222222"]["last_result"] == "no_result"
    )
    assert found["+491702222222"]["next_attempt_at"] is None
    assert len(twilio.state.calls) == 2


async def test_a_number_added_by_another_upload_meanwhile_is_409_not_500(
    org: Org, database: Database
) -> None:
    """The duplicate check runs before the body is read (no transaction while it streams in); a
    contact another request commits in between hits the unique constraint: 409, nothing added.
    (The service is driven directly: the in-process HTTP client reads a body before the app runs.)"""
    campaign = await make_campaign(org)

    async def body() -> AsyncIterator[bytes]:
        yield b"phone\n+491707777777\n"
        async with database.sessionmaker() as session:  # another upload commits the same number now
            session.add(
                CampaignContact(
                    id="cc_meanwhile",
                    organization_id=org.id,
                    campaign_id=campaign["id"],
                    row_number=1,
                    phone="+491708888888",
                    variables={},
                    status="pending",
                    attempts=0,
                )
            )
            await session.commit()
        yield b"+491708888888\n"

    with pytest.raises(Conflict, match="meanwhile"):
        async with unit_of_work(database, write=True) as session:
            await campaigns_service.upload_contacts(session, org.id, campaign["id"], body(), "csv")
    assert list(await contacts(org, campaign["id"])) == ["+491708888888"]  # only the other request's
