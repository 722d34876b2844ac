"""A Twilio call handed over to a person, end to end over real HTTP and WebSockets: the signed voice
webhook, a media stream client speaking Twilio's protocol, the caller asking for a person, the
platform redirecting the live call through the local Twilio REST server (``<Dial>`` with an action
callback), Twilio's signed dial report (busy → back in the same session's flow over a new stream
with a fresh token and a spoken apology; answered → the call is transferred) and the call record.
SQLite and PostgreSQL (the ``live`` fixture)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode
from uuid import uuid4

import httpx
import pytest
from websockets.asyncio.client import connect

from parley.auth.stream_tokens import verify_stream_token
from parley.telephony.providers.twilio import compute_signature
from tests.live import serve_in_thread
from tests.notifications.conftest import Receiver, receiver  # noqa: F401  (fixture)
from tests.stubs import twilio as tw_stub
from tests.voice.pipeline.livevoice import (
    call_record_when,
    http_get,
    http_post,
    session,
    use_fakes,
    wait_ended,
)
from tests.voice.pipeline.test_transport_twilio import SILENCE_8K, SPEECH_8K, FakeTwilio

NUMBER = "+4930123460"
TARGET = "+4930999999"
WEBHOOK = "/api/telephony/twilio/voice"
DIAL = "/api/telephony/twilio/dial"
CONNECTING = "I am connecting you with a colleague."
BUSY = "Sorry, that line is busy right now. I am back with you."

HANDOFF_FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "wish", "kind": "free_text", "prompt": "How can I help?",
         "next": "human"},
        {"id": "human", "type": "transfer", "phone_number": TARGET, "message": CONNECTING, "next": "back"},
        {"id": "back", "type": "collect", "variable": "more", "kind": "free_text",
         "prompt": "What else can I do for you?", "next": "bye"},
        {"id": "bye", "type": "end", "text": "Goodbye."},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def twilio_server() -> Iterator[tuple[str, tw_stub.TwilioState]]:
    state = tw_stub.TwilioState()
    with serve_in_thread(tw_stub.make_twilio_stub(state)) as url:
        yield url, state


@pytest.fixture
def phone(live: dict[str, Any], twilio_server: tuple[str, tw_stub.TwilioState]) -> Iterator[dict[str, Any]]:
    """The organization's Twilio account on the local Twilio REST server, and a number answered by a
    flow that transfers; the public URL is the live server's (Twilio signs the URLs it calls)."""
    url, state = twilio_server
    state.reset()
    settings = live["app"].state.settings
    saved = settings.public_url, settings.outbound_allowlist
    settings.public_url, settings.outbound_allowlist = live["url"], ["127.0.0.1"]
    configured = httpx.put(
        f"{live['url']}/api/providers/twilio/config",
        json={"account_sid": tw_stub.ACCOUNT_SID, "auth_token": tw_stub.AUTH_TOKEN, "api_base": url},
        headers=live["headers"],
        timeout=60,
    )
    assert configured.status_code == 200, configured.text
    if "handoff_flow" not in live:
        flow = http_post(
            f"{live['url']}/api/flows",
            json={"name": "Handoff", "definition": HANDOFF_FLOW},
            headers=live["headers"],
        ).json()
        published = http_post(f"{live['url']}/api/flows/{flow['id']}/publish", headers=live["headers"])
        assert published.status_code == 200, published.text
        created = http_post(
            f"{live['url']}/api/telephony/numbers",
            json={"number": NUMBER, "provider": "twilio", "flow_id": flow["id"]},
            headers=live["headers"],
        )
        assert created.status_code == 200, created.text
        live["handoff_flow"] = flow["id"]
    try:
        yield {**live, "twilio": state}
    finally:
        settings.public_url, settings.outbound_allowlist = saved
        state.reset()


def signed_post(live: dict[str, Any], path_and_query: str, form: list[tuple[str, str]]) -> httpx.Response:
    signature = compute_signature(tw_stub.AUTH_TOKEN, live["url"] + path_and_query, form)
    return http_post(
        live["url"] + path_and_query,
        content=urlencode(form).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature},
    )


def incoming_call(live: dict[str, Any], call_sid: str) -> tuple[str, str]:
    """Twilio rings Parley: the stream URL and token of the TwiML answer."""
    live["twilio"].ring(call_sid, "+491701112233", NUMBER)
    answered = signed_post(
        live,
        WEBHOOK,
        [
            ("AccountSid", tw_stub.ACCOUNT_SID),
            ("CallSid", call_sid),
            ("CallStatus", "ringing"),
            ("From", "+491701112233"),
            ("To", NUMBER),
        ],
    )
    assert answered.status_code == 200, answered.text
    return stream_of(answered.text)


def stream_of(twiml: str) -> tuple[str, str]:
    stream = re.search(r'<Stream url="([^"]+)">', twiml)
    token = re.search(r'<Parameter name="token" value="([^"]+)"/>', twiml)
    assert stream is not None and token is not None, twiml
    return stream.group(1), token.group(1)


def session_of(live: dict[str, Any], token: str) -> str:
    settings = live["app"].state.settings
    return verify_stream_token(settings, token, session_id=None, purpose="twilio-media").session_id


def wait_for_update(state: tw_stub.TwilioState) -> dict[str, str]:
    deadline = time.monotonic() + 10
    while not state.updates:
        assert time.monotonic() < deadline, "the platform never updated the call"
        time.sleep(0.02)
    return state.updates[0]


async def say_until_mark(twilio: FakeTwilio, tts_texts: list[str], text: str) -> None:
    """Read (echoing marks) until the agent has spoken ``text`` and marked it."""
    while True:
        await twilio.until("mark")
        if text in tts_texts:
            return


async def ask_for_a_person(live: dict[str, Any], call_sid: str, script: list[str]) -> tuple[Any, str, str]:
    fakes = use_fakes(live, *script)
    url, token = incoming_call(live, call_sid)
    return fakes, url, token


async def test_a_busy_target_brings_the_caller_back_into_the_same_flow(phone: dict[str, Any]) -> None:
    live = phone
    call_sid = "CA" + "1" * 32
    fakes, url, token = await ask_for_a_person(live, call_sid, ["I want to talk to a person", "nothing"])
    session_id = session_of(live, token)
    async with connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token)
        await say_until_mark(twilio, fakes.tts.texts, "How can I help?")
        await asyncio.sleep(0.3)  # the caller speaks once the greeting has played
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        update = await asyncio.to_thread(wait_for_update, live["twilio"])
        # Twilio ends the media stream when the call is redirected
        await twilio.stop()
        await twilio.closed()
    assert CONNECTING not in fakes.tts.texts  # Twilio's <Say> speaks it, right before <Dial>
    assert update["sid"] == call_sid
    twiml = update["Twiml"]
    action = f"{live['url']}{DIAL}?session={session_id}"
    assert f'<Say language="en-US">{CONNECTING}</Say>' in twiml
    assert f'<Dial action="{action}" method="POST" timeout="30"' in twiml
    assert f">{TARGET}</Number></Dial>" in twiml and 'statusCallbackEvent="answered"' in twiml
    row = session(live, session_id)
    assert row["status"] == "active", row  # the stream stopped; the dial decides

    # an unsigned or forged report changes nothing
    forged = http_post(
        live["url"] + f"{DIAL}?session={session_id}",
        content=urlencode([("CallSid", call_sid), ("DialCallStatus", "completed")]).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": "forged"},
    )
    assert forged.status_code == 403
    other_call = signed_post(
        live,
        f"{DIAL}?session={session_id}",
        [("AccountSid", tw_stub.ACCOUNT_SID), ("CallSid", "CA" + "9" * 32), ("DialCallStatus", "completed")],
    )
    assert other_call.status_code == 403

    # the target is busy: Twilio calls the action with DialCallStatus=busy
    report = signed_post(
        live,
        f"{DIAL}?session={session_id}",
        [
            ("AccountSid", tw_stub.ACCOUNT_SID),
            ("CallSid", call_sid),
            ("CallStatus", "in-progress"),
            ("DialCallSid", "CA" + "2" * 32),
            ("DialCallStatus", "busy"),
        ],
    )
    assert report.status_code == 200, report.text
    url2, token2 = stream_of(report.text)
    assert url2 == url and token2 != token and session_of(live, token2) == session_id
    # the same report again (a retry, a replay) brings nobody back and hands out no stream token
    again = signed_post(
        live,
        f"{DIAL}?session={session_id}",
        [("AccountSid", tw_stub.ACCOUNT_SID), ("CallSid", call_sid), ("DialCallStatus", "busy")],
    )
    assert again.status_code == 200 and "<Stream" not in again.text and "<Hangup/>" in again.text

    async with connect(url2) as ws:
        twilio = FakeTwilio(ws, stream_sid="MZsecondleg")
        await twilio.start(token2)
        await say_until_mark(twilio, fakes.tts.texts, "What else can I do for you?")
        assert fakes.tts.texts[-2:] == [BUSY, "What else can I do for you?"]
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await twilio.until("mark", "end")
        assert await twilio.closed() == (1000, "")
    assert fakes.tts.texts[-1] == "Goodbye."

    ended = wait_ended(live, session_id)
    assert ended["outcome"] == "completed" and ended["variables"]["more"] == "nothing"
    call = call_record_when(live, session_id)
    assert call["outcome"] == "completed" and call["transfer_status"] == "busy"
    assert call["transferred_to"] is None and call["transferred_at"] is None
    said = [t["text"] for t in call["transcript"] if t["speaker"] == "agent"]
    assert said == ["How can I help?", CONNECTING, BUSY, "What else can I do for you?", "Goodbye."]
    assert "transfer_failed" in call["signal_types"]


async def test_an_answered_transfer_ends_the_call_as_transferred(
    phone: dict[str, Any],
    receiver: Receiver,  # noqa: F811
) -> None:
    live = phone
    subscription = http_post(
        f"{live['url']}/api/webhooks/subscriptions",
        json={
            "url": f"{receiver.url}/hook/flaky/transfer-{uuid4().hex[:8]}",
            "event_types": ["call.ended"],
            "secret": "whsec_transfer_call_events",
        },
        headers=live["headers"],
    ).json()
    call_sid = "CA" + "3" * 32
    fakes, url, token = await ask_for_a_person(live, call_sid, ["a real person please"])
    session_id = session_of(live, token)
    async with connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token)
        await say_until_mark(twilio, fakes.tts.texts, "How can I help?")
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await asyncio.to_thread(wait_for_update, live["twilio"])
        await twilio.stop()
        await twilio.closed()
    # the colleague picks up: the dialled number's status callback, then (much later) the action
    answered = signed_post(
        live,
        f"{DIAL}?session={session_id}&event=answered",
        [
            ("AccountSid", tw_stub.ACCOUNT_SID),
            ("CallSid", "CA" + "4" * 32),
            ("ParentCallSid", call_sid),
            ("CallStatus", "in-progress"),
        ],
    )
    assert answered.status_code == 200 and "<Response/>" in answered.text, answered.text
    ended = wait_ended(live, session_id)
    assert (ended["outcome"], ended["end_reason"]) == ("transferred", "transferred")
    done = signed_post(
        live,
        f"{DIAL}?session={session_id}",
        [("AccountSid", tw_stub.ACCOUNT_SID), ("CallSid", call_sid), ("DialCallStatus", "completed")],
    )
    assert done.status_code == 200 and "<Hangup/>" in done.text and "<Stream" not in done.text
    call = call_record_when(live, session_id)
    assert (call["outcome"], call["transferred_to"], call["transfer_status"]) == (
        "transferred",
        TARGET,
        "transferred",
    )
    assert call["transferred_at"] is not None and call["transferred_at"] >= call["started_at"]
    # the stream stopped for the dial: call.ended was stored with the record, not after the grace
    log = http_get(
        f"{live['url']}/api/webhooks/deliveries",
        params={"subscription_id": subscription["id"], "event_type": "call.ended"},
        headers=live["headers"],
    ).json()["items"]
    httpx.delete(
        f"{live['url']}/api/webhooks/subscriptions/{subscription['id']}", headers=live["headers"], timeout=60
    )
    payloads = [
        http_get(f"{live['url']}/api/webhooks/deliveries/{d['id']}", headers=live["headers"]).json()[
            "payload"
        ]["data"]
        for d in log
    ]
    assert [p["call_id"] for p in payloads] == [call["id"]]
    assert payloads[0]["outcome"] == "transferred"


async def test_twilio_refusing_the_transfer_is_an_apology_on_the_same_stream(phone: dict[str, Any]) -> None:
    live = phone
    live["twilio"].outage = True
    call_sid = "CA" + "5" * 32
    fakes, url, token = await ask_for_a_person(live, call_sid, ["a person", "no thanks"])
    session_id = session_of(live, token)
    async with connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token)
        await say_until_mark(twilio, fakes.tts.texts, "How can I help?")
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await say_until_mark(twilio, fakes.tts.texts, "What else can I do for you?")
        assert fakes.tts.texts[-2:] == [
            "Sorry, I cannot connect you right now.",
            "What else can I do for you?",
        ]
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await twilio.until("mark", "end")
    assert live["twilio"].updates == []
    ended = wait_ended(live, session_id)
    assert ended["outcome"] == "completed"
    call = call_record_when(live, session_id)
    assert call["transfer_status"] == "failed" and "transfer_failed" in call["signal_types"]


async def test_a_caller_who_hangs_up_while_the_target_rings_abandons_the_call(phone: dict[str, Any]) -> None:
    live = phone
    call_sid = "CA" + "6" * 32
    fakes, url, token = await ask_for_a_person(live, call_sid, ["a person"])
    session_id = session_of(live, token)
    async with connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token)
        await say_until_mark(twilio, fakes.tts.texts, "How can I help?")
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await asyncio.to_thread(wait_for_update, live["twilio"])
        await twilio.stop()
        await twilio.closed()
    gone = signed_post(
        live,
        f"{DIAL}?session={session_id}",
        [
            ("AccountSid", tw_stub.ACCOUNT_SID),
            ("CallSid", call_sid),
            ("CallStatus", "completed"),
            ("DialCallStatus", "no-answer"),
        ],
    )
    assert gone.status_code == 200 and "<Stream" not in gone.text, gone.text
    ended = wait_ended(live, session_id)
    assert (ended["outcome"], ended["end_reason"]) == ("abandoned", "caller_hung_up")
    call = call_record_when(live, session_id)
    assert call["transfer_status"] == "no-answer" and call["transferred_to"] is None
