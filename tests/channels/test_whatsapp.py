"""WhatsApp accounts and the webhook, end to end: Meta's signed notifications in, Graph API sends out
(to a local Graph API stub on loopback), sessions of the routed flow in between."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.channels.models import ChannelRoute, WhatsAppAccount, WhatsAppMessage
from parley.channels.tasks import recover_sends as _recover_sends
from parley.channels.whatsapp import SEND_JOB
from parley.kit.jobs import JobContext
from tests.channels.conftest import (
    ACCESS_TOKEN,
    APP_SECRET,
    BOB,
    VERIFY_TOKEN,
    Org,
    closed_flow,
    echo_flow,
)
from tests.stubs.whatsapp import StubState, meta_payload, sign, text_message

PNID = "106540352242922"
KUNDE = "4917012345678"


async def messages(org: Org, account_id: str, **params: Any) -> list[dict[str, Any]]:
    response = await org.get(f"/api/channels/whatsapp/accounts/{account_id}/messages", **params)
    assert response.status_code == 200, response.text
    return list(reversed(response.json()["items"]))  # oldest first


async def routed(org: Org) -> tuple[dict[str, Any], str]:
    account = await org.account(PNID)
    flow = await org.flow(echo_flow())
    await org.route(channel_kind="whatsapp", address=account["id"], flow_id=flow)
    return account, flow


# --- accounts -------------------------------------------------------------------------------------


async def test_account_secrets_are_sealed_and_masked(org: Org, db_session: AsyncSession) -> None:
    account = await org.account(PNID)
    fetched = await org.get(f"/api/channels/whatsapp/accounts/{account['id']}")
    assert fetched.status_code == 200
    body = fetched.json()
    assert body["phone_number_id"] == PNID and body["display_phone_number"] == "+49 30 1234567"
    assert body["access_token"] == "••••oken" and body["app_secret"] == "••••cdef"
    assert body["verify_token"] == "••••ease"
    assert body["webhook_path"] == "/api/channels/whatsapp/webhook"
    for secret in (ACCESS_TOKEN, APP_SECRET, VERIFY_TOKEN):
        assert secret not in fetched.text
    row = await db_session.scalar(select(WhatsAppAccount).where(WhatsAppAccount.id == account["id"]))
    assert row is not None
    stored = orjson.dumps(row.secrets).decode()
    assert ACCESS_TOKEN not in stored and APP_SECRET not in stored and VERIFY_TOKEN not in stored

    # Sending the masked hints back keeps the secrets; a new token replaces only that one.
    kept = await org.patch(
        f"/api/channels/whatsapp/accounts/{account['id']}",
        {"access_token": body["access_token"], "app_secret": body["app_secret"], "name": "Filiale Mitte"},
    )
    assert kept.status_code == 200 and kept.json()["access_token"] == "••••oken"
    assert kept.json()["name"] == "Filiale Mitte"
    changed = await org.patch(
        f"/api/channels/whatsapp/accounts/{account['id']}", {"access_token": "EAAG-rotated-token-9999"}
    )
    assert changed.json()["access_token"] == "••••9999" and changed.json()["app_secret"] == "••••cdef"
    assert (
        await org.patch(f"/api/channels/whatsapp/accounts/{account['id']}", {"app_secret": None})
    ).status_code == 400

    listed = await org.get("/api/channels/whatsapp/accounts")
    assert [a["id"] for a in listed.json()["items"]] == [account["id"]]


async def test_accounts_are_per_organization_and_numbers_unique(org: Org, make_org: Any) -> None:
    account = await org.account(PNID)
    again = await org.post(
        "/api/channels/whatsapp/accounts",
        {
            "phone_number_id": PNID,
            "waba_id": "1",
            "display_phone_number": "+49 30 1",
            "verify_token": "another-token",
            "access_token": "another-access",
            "app_secret": "another-secret",
        },
    )
    assert again.status_code == 409
    bob = await make_org(BOB, "Bobs Garage")
    assert (await bob.get(f"/api/channels/whatsapp/accounts/{account['id']}")).status_code == 404
    assert (
        await bob.patch(f"/api/channels/whatsapp/accounts/{account['id']}", {"name": "x"})
    ).status_code == 404
    assert (await bob.delete(f"/api/channels/whatsapp/accounts/{account['id']}")).status_code == 404
    assert (await bob.get("/api/channels/whatsapp/accounts")).json()["items"] == []
    bad = await org.post("/api/channels/whatsapp/accounts", {"phone_number_id": "12ab", "waba_id": "1"})
    assert bad.status_code == 422

    flow = await org.flow(echo_flow())
    route = await org.route(channel_kind="whatsapp", address=account["id"], flow_id=flow)
    busy = await org.delete(f"/api/channels/whatsapp/accounts/{account['id']}")
    assert busy.status_code == 409 and route["id"] in busy.json()["detail"]
    await org.delete(f"/api/channels/routes/{route['id']}")
    gone = await org.delete(f"/api/channels/whatsapp/accounts/{account['id']}")
    assert gone.json() == {"id": account["id"], "deleted": True}
    assert (await org.get(f"/api/channels/whatsapp/accounts/{account['id']}")).status_code == 404


# --- verification handshake ---------------------------------------------------------------------------


async def test_meta_verification_handshake(org: Org) -> None:
    await org.account(PNID)
    params = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1158201444"}
    ok = await org.client.get("/api/channels/whatsapp/webhook", params=params)
    assert ok.status_code == 200 and ok.text == "1158201444"
    assert ok.headers["content-type"].startswith("text/plain")
    wrong = await org.client.get(
        "/api/channels/whatsapp/webhook", params={**params, "hub.verify_token": "guessing-123"}
    )
    assert wrong.status_code == 403 and "1158201444" not in wrong.text
    assert (
        await org.client.get("/api/channels/whatsapp/webhook", params={"hub.mode": "subscribe"})
    ).status_code == 400
    other_mode = await org.client.get(
        "/api/channels/whatsapp/webhook", params={**params, "hub.mode": "unsubscribe"}
    )
    assert other_mode.status_code == 400


# --- inbound messages ---------------------------------------------------------------------------------


async def test_a_conversation_over_whatsapp(
    org: Org, graph_state: StubState, db_session: AsyncSession
) -> None:
    account, flow = await routed(org)
    first = await org.message(PNID, "wamid.A1", KUNDE, "Wo ist mein Auto?")
    assert first.status_code == 200 and first.json() == {"received": 1, "duplicates": 0, "ignored": 0}
    assert graph_state.requests == []  # answered in the background, not in the webhook request
    await org.drain()

    assert graph_state.sent(KUNDE) == [
        "Hallo, hier ist Autohaus Demo. Was kann ich tun?",
        "Sie sagten: Wo ist mein Auto? Was kann ich tun?",
    ]
    request = graph_state.requests[0]
    assert request["path"] == f"/v21.0/{PNID}/messages"
    assert request["authorization"] == f"Bearer {ACCESS_TOKEN}"
    assert request["json"]["messaging_product"] == "whatsapp" and request["json"]["type"] == "text"

    second = await org.message(PNID, "wamid.A2", KUNDE, "Auftrag 12")
    assert second.json()["received"] == 1
    await org.drain()
    assert graph_state.sent(KUNDE)[-1] == "Sie sagten: Auftrag 12 Was kann ich tun?"

    log = await messages(org, account["id"])
    inbound = [m for m in log if m["direction"] == "in"]
    outbound = [m for m in log if m["direction"] == "out"]
    assert [m["wamid"] for m in inbound] == ["wamid.A1", "wamid.A2"]
    assert {m["status"] for m in inbound} == {"processed"}
    assert inbound[0]["session_id"] == inbound[1]["session_id"]  # one conversation per sender
    assert {m["status"] for m in outbound} == {"sent"} and all(
        m["wamid"].startswith("wamid.stub") for m in outbound
    )

    session = await org.get(f"/api/sessions/{inbound[0]['session_id']}")
    assert session.status_code == 200
    assert (session.json()["channel"], session.json()["caller"], session.json()["flow_id"]) == (
        "whatsapp",
        KUNDE,
        flow,
    )
    assert session.json()["variables"]["wish"] == "Auftrag 12"

    # Another sender has a conversation of their own.
    await org.message(PNID, "wamid.B1", "4915199999999", "Hallo")
    await org.drain()
    assert graph_state.sent("4915199999999")[0].startswith("Hallo, hier ist")
    others = await messages(org, account["id"], wa_id="4915199999999")
    assert others[0]["session_id"] != inbound[0]["session_id"]

    # When the session has ended (e.g. idle), the next message starts a new one.
    ended = await org.post(f"/api/sessions/{inbound[0]['session_id']}/end")
    assert ended.status_code == 200, ended.text
    await org.message(PNID, "wamid.A3", KUNDE, "Noch da?")
    await org.drain()
    assert graph_state.sent(KUNDE)[-2:] == [
        "Hallo, hier ist Autohaus Demo. Was kann ich tun?",
        "Sie sagten: Noch da? Was kann ich tun?",
    ]
    latest = await messages(org, account["id"], wa_id=KUNDE)
    newest_in = [m for m in latest if m["direction"] == "in"][-1]
    assert newest_in["session_id"] != inbound[0]["session_id"]


async def test_replayed_webhooks_are_processed_once(org: Org, graph_state: StubState) -> None:
    account, _ = await routed(org)
    payload = meta_payload(PNID, [text_message("wamid.R1", KUNDE, "Hallo")])
    assert (await org.webhook(payload)).json()["received"] == 1
    await org.drain()
    sent = len(graph_state.requests)
    assert sent == 2
    replay = await org.webhook(payload)
    assert replay.status_code == 200 and replay.json() == {"received": 0, "duplicates": 1, "ignored": 0}
    # A delivery carrying the same message twice, and a new one beside a known one.
    twice = meta_payload(
        PNID,
        [
            text_message("wamid.R2", KUNDE, "eins"),
            text_message("wamid.R2", KUNDE, "eins"),
            text_message("wamid.R1", KUNDE, "Hallo"),
        ],
    )
    assert (await org.webhook(twice)).json() == {"received": 1, "duplicates": 2, "ignored": 0}
    await org.drain()
    assert len(graph_state.requests) == sent + 1
    assert len([m for m in await messages(org, account["id"]) if m["direction"] == "in"]) == 2


async def test_forged_and_malformed_deliveries_are_refused(
    org: Org, graph_state: StubState, db_session: AsyncSession
) -> None:
    account, _ = await routed(org)
    payload = meta_payload(PNID, [text_message("wamid.F1", KUNDE, "Hallo")])
    forged = await org.webhook(payload, secret="not-the-app-secret")
    assert forged.status_code == 403 and forged.json()["code"] == "forbidden"
    raw = orjson.dumps(payload)
    tampered = await org.webhook(raw.replace(b"Hallo", b"Hack!"), signature=sign(raw, APP_SECRET))
    assert tampered.status_code == 403
    unsigned = await org.client.post(
        "/api/channels/whatsapp/webhook", content=raw, headers={"Content-Type": "application/json"}
    )
    assert unsigned.status_code == 403
    assert (await org.webhook(raw, signature="md5=abc")).status_code == 403

    assert (await org.webhook(b"{not json")).status_code == 400
    assert (await org.webhook({"object": "whatsapp_business_account"})).status_code == 400
    assert (
        await org.webhook(
            {"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {"metadata": {}}}]}]}
        )
    ).status_code == 400
    assert (await org.webhook([1, 2, 3])).status_code == 400

    await org.drain()
    assert graph_state.requests == []
    assert await messages(org, account["id"]) == []
    rows = (await db_session.scalars(select(WhatsAppMessage))).all()
    assert rows == []


async def test_unknown_numbers_and_statuses_are_acknowledged_and_ignored(
    org: Org, graph_state: StubState
) -> None:
    account, _ = await routed(org)
    unknown = meta_payload("999000111222333", [text_message("wamid.U1", KUNDE, "Hallo")])
    answer = await org.webhook(unknown, secret="whatever-meta-used")
    assert answer.status_code == 200 and answer.json() == {"received": 0, "duplicates": 0, "ignored": 1}
    statuses = meta_payload(PNID, [])
    statuses["entry"][0]["changes"][0]["value"]["statuses"] = [
        {"id": "wamid.stub000001", "status": "delivered", "timestamp": "1763900001", "recipient_id": KUNDE}
    ]
    assert (await org.webhook(statuses)).json() == {"received": 0, "duplicates": 0, "ignored": 1}
    other_object = {"object": "page", "entry": [{"id": "1", "changes": [{"field": "feed", "value": {}}]}]}
    assert (await org.webhook(other_object)).json()["ignored"] == 1
    await org.drain()
    assert graph_state.requests == [] and await messages(org, account["id"]) == []


async def test_only_text_is_understood(org: Org, graph_state: StubState) -> None:
    account, _ = await routed(org)
    image = {
        "from": KUNDE,
        "id": "wamid.I1",
        "timestamp": "1763900000",
        "type": "image",
        "image": {"id": "1"},
    }
    assert (await org.webhook(meta_payload(PNID, [image]))).json()["received"] == 1
    await org.drain()
    assert graph_state.sent(KUNDE) == [
        "Sorry, I can only read text messages. Please write your request as text."
    ]
    await org.patch(
        f"/api/channels/whatsapp/accounts/{account['id']}", {"unsupported_reply": "Bitte nur Text."}
    )
    voice = {**image, "id": "wamid.I2", "type": "audio"}
    await org.webhook(meta_payload(PNID, [voice]))
    # A quick-reply button counts as text.
    button = {"from": KUNDE, "id": "wamid.I3", "type": "button", "button": {"text": "Ja", "payload": "yes"}}
    await org.webhook(meta_payload(PNID, [button]))
    await org.drain()
    assert graph_state.sent(KUNDE)[1] == "Bitte nur Text."
    assert graph_state.sent(KUNDE)[2:] == [
        "Hallo, hier ist Autohaus Demo. Was kann ich tun?",
        "Sie sagten: Ja Was kann ich tun?",
    ]


async def test_no_route_means_no_answer_and_office_hours_pick_the_fallback(
    org: Org, graph_state: StubState
) -> None:
    account = await org.account(PNID)
    await org.message(PNID, "wamid.N1", KUNDE, "Hallo")
    await org.drain()
    log = await messages(org, account["id"])
    assert [(m["status"], m["error"]) for m in log] == [
        ("ignored", "No route answers this WhatsApp account now.")
    ]
    assert graph_state.requests == []

    day = await org.flow(echo_flow())
    night = await org.flow(closed_flow(), name="Closed")
    never_open = {"timezone": "Europe/Berlin", "weekly": {}}
    await org.route(
        channel_kind="whatsapp",
        address=account["id"],
        flow_id=day,
        fallback_flow_id=night,
        office_hours=never_open,
    )
    await org.message(PNID, "wamid.N2", KUNDE, "Hallo?")
    await org.drain()
    assert graph_state.sent(KUNDE) == ["Wir haben geschlossen."]


async def test_graph_failures_are_retried_or_recorded(org: Org, graph_state: StubState) -> None:
    account, _ = await routed(org)
    graph_state.script[:] = [500, 429]  # transient: the first reply goes out on the third try
    await org.message(PNID, "wamid.G1", KUNDE, "Hallo")
    await org.drain()
    assert [r["status"] for r in graph_state.requests] == [500, 429, 200, 200]
    out = [m for m in await messages(org, account["id"]) if m["direction"] == "out"]
    assert [m["status"] for m in out] == ["sent", "sent"]

    # Permanent: an expired token is not retried; the failure is recorded on each reply.
    await org.patch(f"/api/channels/whatsapp/accounts/{account['id']}", {"access_token": "EAAG-expired-0000"})
    before = len(graph_state.requests)
    await org.message(PNID, "wamid.G2", KUNDE, "Noch was")
    await org.drain()
    assert [r["status"] for r in graph_state.requests[before:]] == [401]
    failed = [
        m for m in await messages(org, account["id"]) if m["direction"] == "out" and m["status"] == "failed"
    ]
    assert len(failed) == 1 and "401" in failed[0]["error"] and "190" in failed[0]["error"]

    # Transient failures that never stop: given up after the configured tries.
    await org.patch(f"/api/channels/whatsapp/accounts/{account['id']}", {"access_token": ACCESS_TOKEN})
    graph_state.script[:] = [503] * 4
    before = len(graph_state.requests)
    await org.message(PNID, "wamid.G3", KUNDE, "Hallo?")
    await org.drain()
    assert [r["status"] for r in graph_state.requests[before:]] == [503, 503, 503, 503]


async def test_pending_replies_are_sent_after_a_restart(
    org: Org, graph_state: StubState, db_session: AsyncSession
) -> None:
    account, _ = await routed(org)
    await org.message(PNID, "wamid.P1", KUNDE, "Hallo")
    # Run only the turn: the replies stay pending as if the process stopped before sending them.
    graph_state.tokens.discard(ACCESS_TOKEN)
    graph_state.script[:] = []
    try:
        await org.drain()
    finally:
        graph_state.tokens.add(ACCESS_TOKEN)
    out = [m for m in await messages(org, account["id"]) if m["direction"] == "out"]
    assert {m["status"] for m in out} == {"failed"}
    # Mark them pending again (as a crash would have left them) and let the recovery find them.
    for message in (
        await db_session.scalars(select(WhatsAppMessage).where(WhatsAppMessage.direction == "out"))
    ).all():
        message.status = "pending"
    await db_session.commit()
    payloads = await _recover_sends(db_session)
    assert len(payloads) == 1
    runner = org.app.state.jobs
    assert isinstance(runner.context, JobContext)
    for payload in payloads:
        runner.enqueue(SEND_JOB, payload)
    before = len(graph_state.sent(KUNDE))
    await org.drain()
    assert len(graph_state.sent(KUNDE)) == before + 2


async def test_nul_characters_in_a_message_are_dropped(org: Org, graph_state: StubState) -> None:
    account, _ = await routed(org)
    response = await org.message(PNID, "wamid.Z\u00001", KUNDE, "Hallo\u0000Welt")
    assert response.status_code == 200 and response.json()["received"] == 1
    await org.drain()
    assert graph_state.sent(KUNDE)[-1] == "Sie sagten: HalloWelt Was kann ich tun?"
    assert (await messages(org, account["id"]))[0]["wamid"] == "wamid.Z1"


async def test_deleting_the_organization_removes_its_channels(
    org: Org, graph_state: StubState, db_session: AsyncSession
) -> None:
    account, _ = await routed(org)
    await org.message(PNID, "wamid.D1", KUNDE, "Hallo")
    await org.drain()
    deleted = await org.client.delete(f"/api/organizations/{org.id}", headers=org.headers)
    assert deleted.status_code == 200, deleted.text
    for model in (ChannelRoute, WhatsAppAccount, WhatsAppMessage):
        rows = (await db_session.scalars(select(model).where(model.organization_id == org.id))).all()
        assert rows == [], model.__name__
    # The number is free again, and its webhook deliveries are acknowledged and ignored.
    answer = await org.message(PNID, "wamid.D2", KUNDE, "Hallo?")
    assert answer.json() == {"received": 0, "duplicates": 0, "ignored": 1}
    assert account["id"]


async def test_long_texts_are_cut_to_a_turn_and_long_replies_split(org: Org, graph_state: StubState) -> None:
    account = await org.account(PNID)
    twice = echo_flow()
    twice["nodes"][2]["text"] = "{{ wish }}|{{ wish }}"
    flow = await org.flow(twice)
    await org.route(channel_kind="whatsapp", address=account["id"], flow_id=flow)
    await org.message(PNID, "wamid.L1", KUNDE, "x" * 5000)
    await org.drain()
    sent = graph_state.sent(KUNDE)
    # The opening, then the 8,001-character echo (two cuts of 4,000 x) in 4,096-character pieces.
    assert sent[0] == "Hallo, hier ist Autohaus Demo. Was kann ich tun?"
    assert [len(part) for part in sent[1:]] == [4096, 3905 + len(" Was kann ich tun?")]
    assert "".join(sent[1:]) == "x" * 4000 + "|" + "x" * 4000 + " Was kann ich tun?"


async def test_with_redaction_on_whatsapp_texts_are_kept_only_until_answered_and_sent(
    org: Org, graph_state: StubState
) -> None:
    """The caller is answered with what they wrote; what stays in the message log is redacted."""
    account, _flow = await routed(org)
    enabled = await org.patch("/api/privacy/settings", {"redaction_enabled": True})
    assert enabled.status_code == 200, enabled.text
    await org.message(PNID, "wamid.R1", KUNDE, "Schreiben Sie an max.muster@example.de")
    await org.drain()
    assert (
        graph_state.sent(KUNDE)[-1] == "Sie sagten: Schreiben Sie an max.muster@example.de Was kann ich tun?"
    )

    log = await messages(org, account["id"])
    assert [m["status"] for m in log if m["direction"] == "out"] == ["sent", "sent"]
    texts = " ".join(m["text"] or "" for m in log)
    assert "max.muster@example.de" not in texts
    assert "Schreiben Sie an [email]" in texts
