"""A phone call end to end over real HTTP and WebSocket: Twilio's signed voice webhook answers TwiML
whose ``<Stream>`` names Parley's media WebSocket and a stream token; a client speaking Twilio's Media
Streams protocol connects there with that token, hears the greeting, says the number and hears the
answer; the call record is the phone call's."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode
from uuid import uuid4

import httpx
import pytest
from websockets.asyncio.client import connect

from parley.auth.stream_tokens import verify_stream_token
from parley.telephony.providers.twilio import compute_signature
from tests.notifications.conftest import Receiver, receiver  # noqa: F401  (fixture)
from tests.voice.pipeline.fakes import TONE
from tests.voice.pipeline.livevoice import call_record_when, use_fakes, wait_ended
from tests.voice.pipeline.test_transport_twilio import SILENCE_8K, SPEECH_8K, FakeTwilio

ACCOUNT_SID = "AC" + "fedcba9876543210" * 2
AUTH_TOKEN = "twilio-auth-token-of-the-voice-test"
NUMBER = "+4930123450"
WEBHOOK = "/api/telephony/twilio/voice"


@pytest.fixture
def phone(live: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The organization's Twilio account and a number answered by the digits flow; the platform's
    public URL is the live server's (Twilio signs the URL it calls)."""
    settings = live["app"].state.settings
    saved = settings.public_url
    settings.public_url = live["url"]
    configured = httpx.put(
        f"{live['url']}/api/providers/twilio/config",
        json={"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN},
        headers=live["headers"],
    )
    assert configured.status_code == 200, configured.text
    numbers = httpx.get(f"{live['url']}/api/telephony/numbers", headers=live["headers"]).json()["items"]
    if not any(n["number"] == NUMBER for n in numbers):
        created = httpx.post(
            f"{live['url']}/api/telephony/numbers",
            json={"number": NUMBER, "provider": "twilio", "flow_id": live["flow"]},
            headers=live["headers"],
        )
        assert created.status_code == 200, created.text
    try:
        yield live
    finally:
        settings.public_url = saved


def incoming_call(live: dict[str, Any], call_sid: str, caller: str) -> httpx.Response:
    form = [
        ("AccountSid", ACCOUNT_SID),
        ("CallSid", call_sid),
        ("CallStatus", "ringing"),
        ("Direction", "inbound"),
        ("From", caller),
        ("To", NUMBER),
    ]
    signature = compute_signature(AUTH_TOKEN, live["url"] + WEBHOOK, form)
    return httpx.post(
        live["url"] + WEBHOOK,
        content=urlencode(form).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature},
    )


async def test_a_dialled_number_streams_its_call_into_the_routed_flow(
    phone: dict[str, Any],
    receiver: Receiver,  # noqa: F811
) -> None:
    live = phone
    fakes = use_fakes(live, "one two")
    fakes.tts.pcm = TONE
    subscription = httpx.post(
        f"{live['url']}/api/webhooks/subscriptions",
        json={
            "url": f"{receiver.url}/hook/flaky/twilio-{uuid4().hex[:8]}",
            "event_types": ["call.started", "call.ended"],
            "secret": "whsec_twilio_call_events_01",
        },
        headers=live["headers"],
    ).json()
    answered = incoming_call(live, "CA" + "7" * 32, caller="+491701112233")
    assert answered.status_code == 200, answered.text
    stream = re.search(r'<Stream url="([^"]+)">', answered.text)
    token = re.search(r'<Parameter name="token" value="([^"]+)"/>', answered.text)
    assert stream is not None and token is not None, answered.text
    assert stream.group(1) == live["ws"] + "/api/telephony/twilio/media"

    async with connect(stream.group(1)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token.group(1))
        greeting = await twilio.until("mark")
        assert fakes.tts.texts == ["Say your number."] and twilio.audio(greeting)
        await asyncio.sleep(0.3)  # the caller answers once the greeting has played
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        await twilio.until("mark", "end")
        assert await twilio.closed() == (1000, "")
    assert fakes.tts.texts[-1] == "Thanks, your number is 12."

    call = call_record_when(
        live, session_id_of(live, token.group(1)), lambda c: c["recording_url"] is not None
    )
    assert call["channel"] == "phone" and call["outcome"] == "completed"
    assert call["caller"] == "+491701112233"
    # the phone line's speech usage: both lines went to synthesis; recognition heard the caller's
    # 0.2 s of speech (with its pre-roll and hangover), never more than the 1.2 s the stream carried
    usage = call["usage"]
    assert usage["tts_characters"] == len("Say your number.") + len("Thanks, your number is 12.")
    assert 0.2 <= usage["stt_seconds"] <= 1.2, usage

    # the call events: inbound, and call.ended (written with the voice facts) says what the caller got
    log = httpx.get(
        f"{live['url']}/api/webhooks/deliveries",
        params={"subscription_id": subscription["id"]},
        headers=live["headers"],
    ).json()["items"]
    httpx.delete(f"{live['url']}/api/webhooks/subscriptions/{subscription['id']}", headers=live["headers"])
    payloads = {
        d["event_type"]: httpx.get(
            f"{live['url']}/api/webhooks/deliveries/{d['id']}", headers=live["headers"]
        ).json()["payload"]["data"]
        for d in log
    }
    assert len(log) == 2 and set(payloads) == {"call.started", "call.ended"}
    assert {p["direction"] for p in payloads.values()} == {"inbound"}
    ended = payloads["call.ended"]
    assert ended["call_id"] == call["id"] and ended["recording_url"] == call["recording_url"]
    assert ended["metrics"]["usage"]["tts_characters"] == usage["tts_characters"]
    assert ended["metrics"]["usage"]["stt_seconds"] == usage["stt_seconds"]
    assert ended["metrics"]["turns"][1]["voice_to_voice_ms"] is not None


def session_id_of(live: dict[str, Any], token: str) -> str:
    grant = verify_stream_token(live["app"].state.settings, token, session_id=None, purpose="twilio-media")
    row = wait_ended(live, grant.session_id)
    assert row["channel"] == "phone" and row["flow_id"] == live["flow"]
    return grant.session_id


async def test_a_forged_webhook_never_reaches_the_media_stream(phone: dict[str, Any]) -> None:
    live = phone
    forged = httpx.post(
        live["url"] + WEBHOOK,
        content=urlencode(
            [("AccountSid", ACCOUNT_SID), ("CallSid", "CA" + "8" * 32), ("To", NUMBER)]
        ).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": "forged"},
    )
    assert forged.status_code == 403 and "<Stream" not in forged.text
