"""/api/privacy: settings and their validation, deleting and exporting a call or a caller, retention
(the route and the scheduled job) with recordings, audit events and tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.models import AuditEvent
from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.channels.models import WhatsAppAccount, WhatsAppMessage
from parley.kit.db import Database
from parley.notifications.models import NotificationDelivery
from parley.privacy import service as privacy_service
from parley.privacy.tasks import RETENTION_JOB, expire_all
from parley.sessions.models import ConversationSession
from parley.webhooks.models import WebhookDelivery, WebhookEvent, WebhookSubscription
from parley.worker import load_tasks
from tests.calls.conftest import Recorder
from tests.calls.helpers import flow_signal, wav_bytes
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, create_org

BOB = make_token("bob", name="Bob")
CALLER = "+4917612345678"


async def _org(client: httpx.AsyncClient, token: str = ALICE, name: str = "Werkstatt") -> str:
    return str((await create_org(client, token, name=name))["id"])


async def _patch(client: httpx.AsyncClient, org: str, body: dict[str, Any]) -> httpx.Response:
    return await client.patch("/api/privacy/settings", json=body, headers=auth(ALICE, org))


async def _audit(db: AsyncSession, org: str, action: str) -> list[AuditEvent]:
    rows = await db.scalars(
        select(AuditEvent).where(AuditEvent.organization_id == org, AuditEvent.action == action)
    )
    return list(rows)


async def test_settings_default_then_change(client: httpx.AsyncClient) -> None:
    org = await _org(client)
    initial = (await client.get("/api/privacy/settings", headers=auth(ALICE, org))).json()
    assert initial["redaction_enabled"] is False and initial["retention_days"] is None
    assert initial["redaction_kinds"] == ["phone", "email", "iban", "card"]
    response = await _patch(
        client,
        org,
        {
            "redaction_enabled": True,
            "redaction_kinds": ["phone", "email"],
            "replacements": {"phone": "<Telefon>"},
            "custom_patterns": [{"name": "kundennummer", "pattern": r"KD-\d{6}", "replacement": "[kunde]"}],
            "retention_days": 30,
            "recording_notice": {
                "de": "Dieses Gespräch wird aufgezeichnet.",
                "default": "This call is recorded.",
            },
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["redaction_enabled"] is True and body["redaction_kinds"] == ["phone", "email"]
    assert body["replacements"]["phone"] == "<Telefon>" and body["retention_days"] == 30
    preview = await client.post(
        "/api/privacy/redaction/preview",
        json={"text": "KD-123456 unter 0171 1234567, Karte 4111 1111 1111 1111"},
        headers=auth(ALICE, org),
    )
    assert preview.json() == {
        "text": "[kunde] unter <Telefon>, Karte 4111 1111 1111 1111",
        "redaction_enabled": True,
    }
    cleared = await _patch(client, org, {"clear_retention": True, "recording_notice": {}})
    assert cleared.json()["retention_days"] is None and cleared.json()["recording_notice"] == {}
    assert cleared.json()["custom_patterns"][0]["name"] == "kundennummer"  # left out: kept


async def test_bad_settings_are_422_naming_what_is_wrong(client: httpx.AsyncClient) -> None:
    org = await _org(client)
    bad = await _patch(client, org, {"custom_patterns": [{"name": "kaputt", "pattern": "(["}]})
    assert bad.status_code == 422
    error = bad.json()["detail"][0]
    assert error["loc"] == ["body", "custom_patterns", 0, "pattern"]
    assert "'kaputt'" in error["msg"] and "not a valid regular expression" in error["msg"]
    slow = await _patch(client, org, {"custom_patterns": [{"name": "slow", "pattern": "(a|aa)+$"}]})
    assert slow.status_code == 422 and "takes too long" in slow.json()["detail"][0]["msg"]
    zero = await _patch(client, org, {"retention_days": 0})
    assert zero.status_code == 422 and "0 days" in zero.json()["detail"][0]["msg"]
    notice = await _patch(client, org, {"recording_notice": {"deutsch": "Hallo"}})
    assert notice.status_code == 422 and "language code" in notice.json()["detail"][0]["msg"]
    kind = await _patch(client, org, {"redaction_kinds": ["passport"]})
    assert kind.status_code == 422
    long = await _patch(client, org, {"replacements": {"phone": "x" * 61}})
    assert long.status_code == 422 and "at most 60" in long.json()["detail"][0]["msg"]
    # nothing of it was kept
    assert (await client.get("/api/privacy/settings", headers=auth(ALICE, org))).json()[
        "custom_patterns"
    ] == []


async def test_only_admins_change_settings_or_delete(client: httpx.AsyncClient, record: Recorder) -> None:
    org = await _org(client)
    member = make_token("mia", name="Mia")
    await client.get("/api/me", headers=auth(member))
    invited = await client.post(
        f"/api/organizations/{org}/members",
        json={"subject": "mia", "role": "member"},
        headers=auth(ALICE, org),
    )
    assert invited.status_code == 200, invited.text
    call = await record(org)
    assert (
        await client.patch("/api/privacy/settings", json={}, headers=auth(member, org))
    ).status_code == 403
    assert (
        await client.delete(f"/api/privacy/calls/{call.id}", headers=auth(member, org))
    ).status_code == 403


async def test_delete_one_call_with_recording_and_signals(
    client: httpx.AsyncClient, app: Any, record: Recorder, db_session: AsyncSession, database: Database
) -> None:
    org = await _org(client)
    call = await record(org, recording_filename="loeschen.wav", signals=[flow_signal()], caller=CALLER)
    keep = await record(org, session_id="ses_keep", started_at=datetime(2026, 3, 3, tzinfo=UTC))
    await app.state.blobs.put(call.blob_key, wav_bytes(), "audio/wav")
    signal_id = await db_session.scalar(select(BrainSignal.id).where(BrainSignal.call_id == call.id))
    async with database.sessionmaker() as session:
        session.add(
            NotificationDelivery(
                id="ntd_privacy_1",
                organization_id=org,
                kind="signal",
                channel_id="nch_x",
                channel_type="webhook",
                channel_name="CRM",
                signal_id=signal_id,
                status="delivered",
                payload={"caller": CALLER},
            )
        )
        await session.commit()
    exported = await client.get(f"/api/privacy/calls/{call.id}/export", headers=auth(ALICE, org))
    assert exported.status_code == 200
    assert (
        exported.json()["call"]["id"] == call.id
        and exported.json()["call"]["signals"][0]["type"] == "vip_customer"
    )
    response = await client.delete(f"/api/privacy/calls/{call.id}", headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    assert response.json() == {"id": call.id, "deleted": True, "recording_deleted": True, "sessions": 0}
    assert not await app.state.blobs.exists(call.blob_key)
    assert (await client.get(f"/api/calls/{call.id}", headers=auth(ALICE, org))).status_code == 404
    assert await db_session.scalar(select(func.count()).where(BrainSignal.call_id == call.id)) == 0
    assert await db_session.get(NotificationDelivery, "ntd_privacy_1") is None
    assert (await client.get(f"/api/calls/{keep.id}", headers=auth(ALICE, org))).status_code == 200
    events = await _audit(db_session, org, "delete_call")
    assert [(e.resource_type, e.resource_id) for e in events] == [("call", call.id)]
    assert events[0].details == {"recording_deleted": True, "sessions": 0}
    again = await client.delete(f"/api/privacy/calls/{call.id}", headers=auth(ALICE, org))
    assert again.status_code == 404


async def test_another_organizations_calls_and_callers_are_404_or_empty(
    client: httpx.AsyncClient, app: Any, record: Recorder, db_session: AsyncSession
) -> None:
    org = await _org(client)
    theirs = await _org(client, BOB, "Bobs Garage")
    call = await record(theirs, recording_filename="bob.wav", caller=CALLER)
    await app.state.blobs.put(call.blob_key, wav_bytes(), "audio/wav")
    assert (await client.delete(f"/api/privacy/calls/{call.id}", headers=auth(ALICE, org))).status_code == 404
    assert (
        await client.get(f"/api/privacy/calls/{call.id}/export", headers=auth(ALICE, org))
    ).status_code == 404
    exported = await client.get(f"/api/privacy/callers/{CALLER}/export", headers=auth(ALICE, org))
    assert exported.status_code == 200 and exported.json()["calls"] == []
    deleted = await client.delete(f"/api/privacy/callers/{CALLER}", headers=auth(ALICE, org))
    assert deleted.json()["calls"] == 0
    assert await app.state.blobs.exists(call.blob_key)
    assert (await client.get(f"/api/calls/{call.id}", headers=auth(BOB, theirs))).status_code == 200


async def test_a_caller_export_holds_every_call_and_event_beyond_one_page(
    client: httpx.AsyncClient, record: Recorder, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read a page at a time (here 2): a caller with more calls than a page still gets all of them.
    monkeypatch.setattr(privacy_service, "CALLER_LIMIT", 2)
    org = await _org(client)
    made = [
        await record(
            org,
            session_id=f"ses_page_{n}",
            caller=CALLER,
            started_at=datetime(2026, 3, 1 + n, tzinfo=UTC),
        )
        for n in range(5)
    ]
    await record(org, session_id="ses_someone_else", caller="+4930111222")
    async with database.sessionmaker() as session:
        for n, call in enumerate(made):  # an event about each call, and some about the number itself
            session.add(
                WebhookEvent(
                    id=f"evt_call_{n}", organization_id=org, type="call.ended", data={"call_id": call.id}
                )
            )
        for n in range(3):
            session.add(
                WebhookEvent(
                    id=f"evt_num_{n}", organization_id=org, type="call.started", data={"caller": CALLER}
                )
            )
        await session.commit()
    exported = await client.get(f"/api/privacy/callers/{CALLER}/export", headers=auth(ALICE, org))
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert sorted(c["id"] for c in body["calls"]) == sorted(c.id for c in made)
    assert [e["id"] for e in body["sources"]["webhook_events"]] == sorted(
        [f"evt_call_{n}" for n in range(5)] + [f"evt_num_{n}" for n in range(3)]
    )


async def test_export_and_delete_everything_about_a_caller(
    client: httpx.AsyncClient, app: Any, record: Recorder, db_session: AsyncSession, database: Database
) -> None:
    org = await _org(client)
    inbound = await record(
        org, session_id="ses_in", caller=CALLER, recording_filename="in.wav", signals=[flow_signal()]
    )
    outbound = await record(
        org,
        session_id="ses_out",
        direction="outbound",
        caller="+4930999000",
        callee=CALLER,
        started_at=datetime(2026, 3, 4, tzinfo=UTC),
    )
    other = await record(
        org, session_id="ses_other", caller="+4930111222", started_at=datetime(2026, 3, 5, tzinfo=UTC)
    )
    await app.state.blobs.put(inbound.blob_key, wav_bytes(), "audio/wav")
    async with database.sessionmaker() as session:
        session.add(
            ConversationSession(
                id="ses_in",
                organization_id=org,
                flow_id=None,
                channel="phone",
                status="ended",
                caller=CALLER,
                state={"transcript": [{"text": "hallo"}]},
                version=1,
            )
        )
        # the same person on WhatsApp: the id is the number without its "+"
        session.add(
            WhatsAppAccount(
                id="wa_privacy",
                organization_id=org,
                phone_number_id="pn_privacy_1",
                waba_id="waba_1",
                display_phone_number="+4930999000",
                secrets={},
                verify_token_sha256="0" * 64,
            )
        )
        await session.flush()
        session.add(
            ConversationSession(
                id="ses_wa",
                organization_id=org,
                flow_id=None,
                channel="whatsapp",
                status="ended",
                caller=CALLER[1:],
                state={},
                version=1,
            )
        )
        for n, direction in enumerate(("in", "out")):
            session.add(
                WhatsAppMessage(
                    id=f"wam_{n}",
                    organization_id=org,
                    account_id="wa_privacy",
                    direction=direction,
                    wa_id=CALLER[1:],
                    type="text",
                    text="Meine IBAN ist DE89 3704 0044 0532 0130 00",
                    status="processed",
                    session_id="ses_wa",
                )
            )
        await session.commit()

    bad = await client.get("/api/privacy/callers/0171-kaputt/export", headers=auth(ALICE, org))
    assert bad.status_code == 422
    exported = await client.get("/api/privacy/callers/+49 176 12345678/export", headers=auth(ALICE, org))
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert body["phone_number"] == CALLER
    assert sorted(c["id"] for c in body["calls"]) == sorted([inbound.id, outbound.id])
    assert sorted(s["id"] for s in body["sources"]["sessions"]) == ["ses_in", "ses_wa"]
    assert [m["id"] for m in body["sources"]["whatsapp_messages"]] == ["wam_0", "wam_1"]
    assert body["sources"]["sessions"][0]["transcript"] == [{"text": "hallo"}]

    deleted = await client.delete(f"/api/privacy/callers/%2B{CALLER[1:]}", headers=auth(ALICE, org))
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {
        "phone_number": CALLER,
        "deleted": True,
        "calls": 2,
        "recordings": 1,
        "sources": {"sessions": 2, "whatsapp_messages": 2, "campaign_contacts": 0},
    }
    assert not await app.state.blobs.exists(inbound.blob_key)
    remaining = await db_session.scalars(select(Call.id).where(Call.organization_id == org))
    assert list(remaining) == [other.id]
    assert (
        await db_session.scalar(select(func.count()).where(ConversationSession.organization_id == org)) == 0
    )
    (event,) = await _audit(db_session, org, "delete_caller")
    # the audit trail keeps a masked number, not the one that was deleted
    assert event.resource_type == "caller" and event.resource_id == "+49*********78"
    assert event.details == {
        "calls": 2,
        "recordings": 1,
        "sources": {"sessions": 2, "whatsapp_messages": 2, "campaign_contacts": 0},
    }
    assert await db_session.scalar(select(func.count()).where(WhatsAppMessage.organization_id == org)) == 0


async def test_retention_job_deletes_old_calls_sessions_and_recordings(
    client: httpx.AsyncClient, app: Any, record: Recorder, db_session: AsyncSession, database: Database
) -> None:
    org = await _org(client)
    kept_org = await _org(client, BOB, "Ohne Frist")
    now = datetime.now(UTC)
    old = await record(
        org, session_id="ses_old", started_at=now - timedelta(days=40), recording_filename="old.wav"
    )
    recent = await record(
        org, session_id="ses_recent", started_at=now - timedelta(days=2), recording_filename="new.wav"
    )
    untouched = await record(kept_org, session_id="ses_bob", started_at=now - timedelta(days=400))
    for call in (old, recent):
        await app.state.blobs.put(call.blob_key, wav_bytes(), "audio/wav")
    async with database.sessionmaker() as session:
        session.add(
            ConversationSession(
                id="ses_old",
                organization_id=org,
                flow_id=None,
                channel="phone",
                status="ended",
                state={},
                version=1,
                started_at=now - timedelta(days=40),
                ended_at=now - timedelta(days=40),
            )
        )
        await session.commit()
    assert (await _patch(client, org, {"retention_days": 30})).status_code == 200

    assert RETENTION_JOB in load_tasks().handlers  # parley worker loads the same handlers
    # the job as the timer queues it, run by the app's job runner
    await app.state.jobs.submit(RETENTION_JOB, {})
    await app.state.jobs.drain()
    ids = set(await db_session.scalars(select(Call.id)))
    assert old.id not in ids and {recent.id, untouched.id} <= ids
    assert not await app.state.blobs.exists(old.blob_key)
    assert await app.state.blobs.exists(recent.blob_key)
    assert await db_session.get(ConversationSession, "ses_old") is None
    events = await _audit(db_session, org, "privacy.retention_delete_call")
    assert [(e.actor_type, e.actor_id, e.resource_id) for e in events] == [
        ("system", "privacy.retention", old.id)
    ]
    assert events[0].details is not None and events[0].details["recording_deleted"] is True
    # nothing left to do: a second run deletes nothing
    assert await expire_all(database, app.state.blobs) == 0


async def test_retention_on_demand_and_without_a_retention(
    client: httpx.AsyncClient, record: Recorder, db_session: AsyncSession
) -> None:
    org = await _org(client)
    old = await record(org, started_at=datetime.now(UTC) - timedelta(days=10))
    nothing = await client.post("/api/privacy/retention/run", headers=auth(ALICE, org))
    assert nothing.json() == {"retention_days": None, "calls": 0, "recordings": 0, "sources": {}}
    await _patch(client, org, {"retention_days": 7})
    ran = await client.post("/api/privacy/retention/run", headers=auth(ALICE, org))
    assert ran.status_code == 200 and ran.json()["calls"] == 1
    assert (await client.get(f"/api/calls/{old.id}", headers=auth(ALICE, org))).status_code == 404
    (event,) = await _audit(db_session, org, "privacy.retention_delete_call")
    assert event.actor_type == "user" and event.resource_id == old.id


async def test_webhook_events_go_with_the_call_the_caller_and_retention(
    client: httpx.AsyncClient, record: Recorder, db_session: AsyncSession, database: Database
) -> None:
    """The delivery log keeps each event's body (caller, transcript, variables): a call's deletion, a
    caller's deletion and retention remove those events (their deliveries and attempts cascade)."""
    org = await _org(client)
    other_org = await _org(client, BOB, "Andere")
    now = datetime.now(UTC)
    async with database.sessionmaker() as session:
        for owner, sub_id in ((org, "whs_priv_1"), (other_org, "whs_priv_2")):
            session.add(
                WebhookSubscription(
                    id=sub_id,
                    organization_id=owner,
                    url="https://example.invalid/hook",
                    event_types=["call.ended"],
                    active=True,  # no job runner in record(): the deliveries are stored, not sent
                    secret="x",
                    secret_hint="x",
                )
            )
        await session.commit()
    deleted_call = await record(org, session_id="ses_wh_1", started_at=now, caller="+4930111111")
    caller_call = await record(org, session_id="ses_wh_2", started_at=now, caller=CALLER)
    kept_call = await record(org, session_id="ses_wh_3", started_at=now, caller="+4930333333")
    foreign_call = await record(other_org, session_id="ses_wh_4", started_at=now, caller=CALLER)

    async def event_of(call_id: str) -> WebhookEvent | None:
        db_session.expire_all()
        rows = (await db_session.scalars(select(WebhookEvent))).all()
        return next((e for e in rows if e.data.get("call_id") == call_id), None)

    for call in (deleted_call, caller_call, kept_call, foreign_call):
        assert await event_of(call.id) is not None
    async with database.sessionmaker() as session:  # a campaign contact's event names the phone only
        session.add(
            WebhookEvent(
                id="evt_priv_contact",
                organization_id=org,
                type="campaign.contact.completed",
                data={"contact_id": "cc_1", "phone": CALLER, "call_id": None, "variables": {"name": "Eva"}},
                created_at=now,
            )
        )
        session.add(
            WebhookEvent(
                id="evt_priv_old",
                organization_id=org,
                type="call.ended",
                data={"call_id": "call_gone_long_ago", "caller": "+4930444444"},
                created_at=now - timedelta(days=40),
            )
        )
        await session.commit()
    delivery_id = await db_session.scalar(
        select(WebhookDelivery.id).where(WebhookDelivery.event_id == (await event_of(deleted_call.id)).id)  # type: ignore[union-attr]
    )
    assert delivery_id is not None

    assert (
        await client.delete(f"/api/privacy/calls/{deleted_call.id}", headers=auth(ALICE, org))
    ).status_code == 200
    assert await event_of(deleted_call.id) is None
    assert (
        await client.get(f"/api/webhooks/deliveries/{delivery_id}", headers=auth(ALICE, org))
    ).status_code == 404

    exported = await client.get(f"/api/privacy/callers/{CALLER}/export", headers=auth(ALICE, org))
    assert exported.status_code == 200, exported.text
    assert {e["id"] for e in exported.json()["sources"]["webhook_events"]} == {
        "evt_priv_contact",
        (await event_of(caller_call.id)).id,  # type: ignore[union-attr]
    }
    gone = await client.delete(f"/api/privacy/callers/{CALLER}", headers=auth(ALICE, org))
    assert gone.status_code == 200, gone.text
    assert gone.json()["sources"]["webhook_events"] == 2
    assert await event_of(caller_call.id) is None
    assert await db_session.get(WebhookEvent, "evt_priv_contact") is None
    assert await event_of(kept_call.id) is not None
    assert await event_of(foreign_call.id) is not None  # another organization's caller is not touched

    await _patch(client, org, {"retention_days": 30})
    ran = await client.post("/api/privacy/retention/run", headers=auth(ALICE, org))
    assert ran.status_code == 200 and ran.json()["calls"] == 0
    assert ran.json()["sources"]["webhook_events"] == 1
    assert await db_session.get(WebhookEvent, "evt_priv_old") is None
    assert await event_of(kept_call.id) is not None
