"""Calls over the phone: the signed Twilio voice webhook and outbound calls through Twilio and LiveKit."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import httpx
from sqlalchemy import func, select

from parley.auth.stream_tokens import verify_stream_token
from parley.config import Settings
from parley.kit.db import Database
from parley.sessions.models import ConversationSession
from parley.telephony.providers.twilio import compute_signature, signature_valid
from tests.stubs import twilio as tw_stub
from tests.telephony.conftest import ECHO, PUBLIC_URL, Org, Stub

WEBHOOK = "/api/telephony/twilio/voice"
CALL_SID = "CA" + "f" * 32


def test_signature_matches_twilios_documented_examples() -> None:
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    params = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+14158675309"),
        ("Digits", "1234"),
        ("From", "+14158675309"),
        ("To", "+18005551212"),
    ]
    assert compute_signature("12345", url, params) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    assert signature_valid("12345", url, list(reversed(params)), "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    assert not signature_valid("12345", url + "&x=1", params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    assert not signature_valid("54321", url, params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    repeated = [
        ("Sid", "CA123"),
        ("SidAccount", "AC123"),
        ("Digits", "5678"),
        ("Digits", "1234"),
        ("Digits", "1234"),
    ]
    assert compute_signature("12345", url, repeated) == "IK+Dwps556ElfBT0I3Rgjkr1wJU="


def _form(to: str, *, call_sid: str = CALL_SID, caller: str = "+491701234567") -> list[tuple[str, str]]:
    return [
        ("AccountSid", tw_stub.ACCOUNT_SID),
        ("CallSid", call_sid),
        ("CallStatus", "ringing"),
        ("Direction", "inbound"),
        ("From", caller),
        ("To", to),
    ]


async def _webhook(
    client: httpx.AsyncClient,
    form: list[tuple[str, str]],
    *,
    token: str = tw_stub.AUTH_TOKEN,
    signature: str | None = None,
) -> httpx.Response:
    signed = signature if signature is not None else compute_signature(token, PUBLIC_URL + WEBHOOK, form)
    return await client.post(
        WEBHOOK,
        content=urlencode(form).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signed},
    )


async def _sessions(database: Database, organization_id: str) -> int:
    async with database.sessionmaker() as session:
        count = await session.scalar(
            select(func.count())
            .select_from(ConversationSession)
            .where(ConversationSession.organization_id == organization_id)
        )
    return int(count or 0)


async def test_an_incoming_call_connects_its_media_stream_to_the_routed_flow(
    connected: Org, settings: Settings, database: Database
) -> None:
    await connected.make(
        "/api/telephony/numbers",
        {"number": "+4930777000", "provider": "twilio", "flow_id": connected.flow_id},
    )
    response = await _webhook(connected.client, _form("+4930777000"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/xml")
    twiml = response.text
    assert '<Stream url="wss://parley.example/api/telephony/twilio/media">' in twiml
    token = re.search(r'<Parameter name="token" value="([^"]+)"/>', twiml)
    assert token is not None
    grant = verify_stream_token(settings, token.group(1), session_id=None, purpose="twilio-media")
    assert grant.organization_id == connected.id and grant.issued_by == "twilio"

    session = (await connected.get(f"/api/sessions/{grant.session_id}")).json()
    assert session["channel"] == "phone" and session["caller"] == "+491701234567"
    assert session["callee"] == "+4930777000" and session["flow_id"] == connected.flow_id

    # Twilio retries with the same CallSid: processed once, the same session answers again.
    retry = await _webhook(connected.client, _form("+4930777000"))
    assert retry.status_code == 200
    again = re.search(r'value="([^"]+)"', retry.text)
    assert again is not None
    assert (
        verify_stream_token(settings, again.group(1), session_id=None, purpose="twilio-media").session_id
        == grant.session_id
    )
    assert await _sessions(database, connected.id) == 1

    audit = (await connected.get("/api/audit/events")).json()
    assert any(
        e.get("actor_id") == "twilio" and e.get("resource_id") == grant.session_id for e in audit["items"]
    )


async def test_a_channel_route_with_office_hours_decides_the_flow(connected: Org, settings: Settings) -> None:
    other = await connected.make("/api/flows", {"name": "After hours", "definition": ECHO})
    assert (await connected.post(f"/api/flows/{other['id']}/publish")).status_code == 200
    for number in ("+4930777001", "+4930777002"):
        await connected.make(
            "/api/telephony/numbers", {"number": number, "provider": "twilio", "flow_id": connected.flow_id}
        )
    never_open = {"timezone": "Europe/Berlin", "weekly": {}}
    await connected.make(
        "/api/channels/routes",
        {
            "channel_kind": "phone",
            "address": "+49 30 777001",
            "flow_id": connected.flow_id,
            "office_hours": never_open,
            "fallback_flow_id": other["id"],
        },
    )
    routed = await _webhook(connected.client, _form("+4930777001", call_sid="CA" + "1" * 32))
    token = re.search(r'<Parameter name="token" value="([^"]+)"/>', routed.text)
    assert token is not None, routed.text
    grant = verify_stream_token(settings, token.group(1), session_id=None, purpose="twilio-media")
    session = (await connected.get(f"/api/sessions/{grant.session_id}")).json()
    assert session["flow_id"] == other["id"]  # closed: the route's fallback answers, not the number's flow

    # closed and no fallback: nobody answers, and the caller hears so
    await connected.make(
        "/api/channels/routes",
        {
            "channel_kind": "phone",
            "address": "+4930777002",
            "flow_id": other["id"],
            "office_hours": never_open,
        },
    )
    closed = await _webhook(connected.client, _form("+4930777002", call_sid="CA" + "2" * 32))
    assert closed.status_code == 200 and "<Say" in closed.text and "<Hangup/>" in closed.text


async def test_forged_and_unsigned_webhooks_are_refused(connected: Org, database: Database) -> None:
    await connected.make(
        "/api/telephony/numbers",
        {"number": "+4930777000", "provider": "twilio", "flow_id": connected.flow_id},
    )
    forged = await _webhook(connected.client, _form("+4930777000"), token="not-the-auth-token")
    assert forged.status_code == 403 and forged.json()["code"] == "forbidden"
    unsigned = await connected.client.post(
        WEBHOOK,
        content=urlencode(_form("+4930777000")).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert unsigned.status_code == 403
    # A valid signature over other parameters does not carry over.
    signature = compute_signature(tw_stub.AUTH_TOKEN, PUBLIC_URL + WEBHOOK, _form("+4930777000"))
    tampered = await _webhook(
        connected.client, _form("+4930777000", caller="+19999999999"), signature=signature
    )
    assert tampered.status_code == 403
    json_body = await connected.client.post(
        WEBHOOK, json={"To": "+4930777000"}, headers={"X-Twilio-Signature": "x"}
    )
    assert json_body.status_code == 415
    assert await _sessions(database, connected.id) == 0


async def test_an_unknown_number_hears_a_polite_message(connected: Org, database: Database) -> None:
    response = await _webhook(connected.client, _form("+4930000001"))
    assert response.status_code == 200
    assert "<Say" in response.text and "not connected to an assistant" in response.text
    assert response.text.endswith("<Hangup/></Response>")
    # Unknown account as well: nobody can vouch for the request.
    stranger = [("AccountSid", "AC" + "9" * 32), *_form("+4930000001")[1:]]
    assert (await _webhook(connected.client, stranger)).status_code == 403
    assert await _sessions(database, connected.id) == 0


async def test_a_number_without_a_flow_or_an_unpublished_flow_says_so(connected: Org) -> None:
    await connected.make("/api/telephony/numbers", {"number": "+4930777000", "provider": "twilio"})
    response = await _webhook(connected.client, _form("+4930777000"))
    assert (
        response.status_code == 200
        and "not available right now" in response.text
        and "<Hangup/>" in response.text
    )


async def test_outbound_call_through_twilio(connected: Org, twilio: Stub, database: Database) -> None:
    twilio.state.add_number("+4930777000")
    await connected.make("/api/telephony/numbers", {"number": "+4930777000", "provider": "twilio"})
    response = await connected.post(
        "/api/calls/outbound",
        {"flow_id": connected.flow_id, "to": "+49 170 1234567", "from_number": "+4930777000"},
    )
    assert response.status_code == 200, response.text
    call = response.json()
    assert call["provider"] == "twilio" and call["status"] == "queued" and call["to"] == "+491701234567"
    (placed,) = twilio.state.calls
    assert placed["To"] == "+491701234567" and placed["From"] == "+4930777000"
    assert "<Connect><Stream" in placed["Twiml"] and placed["sid"] == call["provider_call_id"]
    session = (await connected.get(f"/api/sessions/{call['session_id']}")).json()
    assert session["channel"] == "phone" and session["callee"] == "+491701234567"


async def test_outbound_call_refusals(connected: Org, twilio: Stub, database: Database) -> None:
    await connected.make("/api/telephony/numbers", {"number": "+4930777000", "provider": "twilio"})
    not_ours = await connected.post(
        "/api/calls/outbound",
        {"flow_id": connected.flow_id, "to": "+491701234567", "from_number": "+4930111111"},
    )
    assert (
        not_ours.status_code == 404 and "not one of this organization's numbers" in not_ours.json()["detail"]
    )
    unknown_flow = await connected.post(
        "/api/calls/outbound", {"flow_id": "flow_nope", "to": "+491701234567", "from_number": "+4930777000"}
    )
    assert unknown_flow.status_code == 404

    # Twilio refuses (the number is not in the account): 502 with Twilio's reason, no session kept.
    refused = await connected.post(
        "/api/calls/outbound",
        {"flow_id": connected.flow_id, "to": "+491701234567", "from_number": "+4930777000"},
    )
    assert refused.status_code == 502
    assert "not yet verified for your account" in refused.json()["detail"]
    twilio.state.add_number("+4930777000")
    twilio.state.outage = True
    down = await connected.post(
        "/api/calls/outbound",
        {"flow_id": connected.flow_id, "to": "+491701234567", "from_number": "+4930777000"},
    )
    assert down.status_code == 502 and "bad day" in down.json()["detail"]
    assert await _sessions(database, connected.id) == 0


async def test_outbound_call_through_livekit(connected: Org, livekit: Stub) -> None:
    await connected.make("/api/telephony/numbers", {"number": "+4930888000", "provider": "livekit"})
    body = {"flow_id": connected.flow_id, "to": "+491701234567", "from_number": "+4930888000"}
    no_trunk = await connected.post("/api/calls/outbound", body)
    assert no_trunk.status_code == 409 and "outbound trunk" in no_trunk.json()["detail"]

    await connected.make(
        "/api/telephony/trunks",
        {
            "name": "Out",
            "direction": "outbound",
            "numbers": ["+4930888000"],
            "address": "sip.carrier.example",
        },
    )
    assert (await connected.sync()).status_code == 200
    response = await connected.post("/api/calls/outbound", body)
    assert response.status_code == 200, response.text
    call = response.json()
    assert call["provider"] == "livekit" and call["provider_call_id"].startswith("SCL_")
    (participant,) = livekit.state.participants
    assert participant.sip_call_to == "+491701234567" and participant.sip_number == "+4930888000"
    assert participant.room_name == f"parley-{call['session_id']}"
    (trunk,) = livekit.state.outbound.values()
    assert participant.sip_trunk_id == trunk.sip_trunk_id

    livekit.state.fail_methods.add("CreateSIPParticipant")
    failed = await connected.post("/api/calls/outbound", body)
    assert failed.status_code == 502 and "failed inside LiveKit" in failed.json()["detail"]


def _resplit(form: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Merge the fields that sort after CallSid (up to From) into CallSid's value: the signature stays."""
    ordered = sorted(form)
    start = next(i for i, (k, _) in enumerate(ordered) if k == "CallSid")
    end = next(i for i, (k, _) in enumerate(ordered) if k == "From")
    merged = ordered[start][1] + "".join(k + v for k, v in ordered[start + 1 : end])
    return [*ordered[:start], ("CallSid", merged), *ordered[end:]]


async def test_a_resplit_webhook_is_refused_before_it_starts_a_session(
    connected: Org, database: Database
) -> None:
    await connected.make(
        "/api/telephony/numbers",
        {"number": "+4930777000", "provider": "twilio", "flow_id": connected.flow_id},
    )
    original = _form("+4930777000")
    first = await _webhook(connected.client, original)
    assert first.status_code == 200 and "<Stream" in first.text
    signature = compute_signature(tw_stub.AUTH_TOKEN, PUBLIC_URL + WEBHOOK, original)
    resplit = _resplit(original)
    # The attack is real: the re-split body carries the very same valid signature ...
    assert compute_signature(tw_stub.AUTH_TOKEN, PUBLIC_URL + WEBHOOK, resplit) == signature
    refused = await _webhook(connected.client, resplit, signature=signature)
    # ... and is refused because its CallSid is not a CallSid, so no second session starts.
    assert refused.status_code == 403, refused.text
    assert refused.json()["detail"] == (
        "This is not a Twilio voice webhook: its CallSid field is not CA followed by 32 hexadecimal digits."
    )
    assert await _sessions(database, connected.id) == 1


async def test_webhooks_missing_or_repeating_a_field_are_refused(connected: Org, database: Database) -> None:
    base = _form("+4930777000")
    cases = {
        "no From": [p for p in base if p[0] != "From"],
        "two CallSids": [*base, ("CallSid", "CA" + "e" * 32)],
        "bad AccountSid": [("AccountSid", "AC123"), *base[1:]],
        "To with a space": [*[p for p in base if p[0] != "To"], ("To", "+49 30 777000")],
    }
    for label, form in cases.items():
        response = await _webhook(connected.client, form)
        assert response.status_code == 403, label
        assert response.json()["detail"].startswith("This is not a Twilio voice webhook"), label
    assert await _sessions(database, connected.id) == 0


async def test_an_old_webhook_replayed_gets_no_stream_and_no_new_session(
    connected: Org, database: Database
) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from parley.kit.db import utcnow
    from parley.telephony.models import TwilioCall
    from parley.telephony.service import TWILIO_REPLAY_WINDOW_SECONDS

    await connected.make(
        "/api/telephony/numbers",
        {"number": "+4930777000", "provider": "twilio", "flow_id": connected.flow_id},
    )
    assert "<Stream" in (await _webhook(connected.client, _form("+4930777000"))).text
    # The call was first seen longer ago than the replay window (as if the request was captured then).
    async with database.sessionmaker() as session:
        await session.execute(
            update(TwilioCall)
            .where(TwilioCall.call_sid == CALL_SID)
            .values(created_at=utcnow() - timedelta(seconds=TWILIO_REPLAY_WINDOW_SECONDS + 60))
        )
        await session.commit()
    replay = await _webhook(connected.client, _form("+4930777000"))
    assert replay.status_code == 200
    assert "<Stream" not in replay.text and "token" not in replay.text
    assert replay.text.endswith("<Hangup/></Response>")
    assert await _sessions(database, connected.id) == 1


async def test_an_outbound_call_is_outbound_on_its_session_record_and_call_events(
    connected: Org, twilio: Stub
) -> None:
    twilio.state.add_number("+4930777000")
    await connected.make("/api/telephony/numbers", {"number": "+4930777000", "provider": "twilio"})
    # a subscription stores each event with its payload (the delivery log shows what is sent)
    await connected.make(
        "/api/webhooks/subscriptions",
        {
            "url": "http://127.0.0.1:9/hook",
            "event_types": ["call.started", "call.ended"],
            "secret": "whsec_direction_test_0123",
        },
    )
    placed = await connected.post(
        "/api/calls/outbound",
        {"flow_id": connected.flow_id, "to": "+491701234567", "from_number": "+4930777000"},
    )
    assert placed.status_code == 200, placed.text
    session_id = placed.json()["session_id"]
    assert (await connected.post(f"/api/sessions/{session_id}/end")).status_code == 200
    # an inbound conversation next to it
    inbound = await connected.post("/api/sessions", {"flow_id": connected.flow_id, "channel": "web"})
    assert (await connected.post(f"/api/sessions/{inbound.json()['id']}/end")).status_code == 200

    listed = (await connected.get("/api/webhooks/deliveries")).json()["items"]
    payloads = [
        (await connected.get(f"/api/webhooks/deliveries/{d['id']}")).json()["payload"] for d in listed
    ]
    directions = {(p["type"], p["data"]["session_id"]): p["data"]["direction"] for p in payloads}
    assert directions == {
        ("call.started", session_id): "outbound",
        ("call.ended", session_id): "outbound",
        ("call.started", inbound.json()["id"]): "inbound",
        ("call.ended", inbound.json()["id"]): "inbound",
    }
    outbound = (await connected.get("/api/calls?direction=outbound")).json()["items"]
    assert [c["direction"] for c in outbound] == ["outbound"]
    full = (await connected.get(f"/api/calls/{outbound[0]['id']}")).json()
    assert full["session_id"] == session_id and full["callee"] == "+491701234567"
    assert [
        c["direction"] for c in (await connected.get("/api/calls?direction=inbound")).json()["items"]
    ] == ["inbound"]
