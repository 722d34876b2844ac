"""POST /api/notifications/test against real local receivers: a signed webhook, a Slack-compatible
endpoint and an SMTP server (aiosmtpd), with the delivery log it writes."""

from __future__ import annotations

import json

from parley.notifications.senders import sign
from tests.notifications.conftest import Mailbox, Platform, PlatformFactory, Receiver
from tests.notifications.helpers import create_channel, email, verify_signature, webhook

SLACK_PATH = "/services/T000/B000/abcdefghijklmnop"


async def _test(platform: Platform, channel_id: str) -> tuple[int, dict[str, object]]:
    response = await platform.client.post(
        "/api/notifications/test", json={"channel_id": channel_id}, headers=platform.headers
    )
    return response.status_code, response.json()


async def test_a_webhook_test_is_signed_and_logged(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/ok", name="signed")
    )
    before = len(receiver.at("/hook/ok"))
    status, body = await _test(platform, channel["id"])
    assert status == 200, body
    assert body["delivered"] is True and body["status"] == "delivered" and body["kind"] == "test"
    assert body["last_status_code"] == 200 and body["attempts"] == 1
    assert [a["outcome"] for a in body["attempt_log"]] == ["delivered"]  # type: ignore[index]

    received = receiver.at("/hook/ok")[before:]
    assert len(received) == 1
    request = received[0]
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-parley-delivery"] == body["id"]
    assert request.headers["x-parley-event"] == "notification.test"
    assert verify_signature(request.headers["x-parley-signature"], request.body)
    assert not verify_signature(request.headers["x-parley-signature"], request.body + b" ")
    payload = json.loads(request.body)
    assert payload["id"] == body["id"] and payload["event"] == "notification.test"
    assert payload["organization_id"] == platform.org and payload["signal"] is None
    assert "signed" in payload["text"]

    log = await platform.client.get(
        "/api/notifications/deliveries",
        params={"kind": "test", "channel_id": channel["id"]},
        headers=platform.headers,
    )
    assert [d["id"] for d in log.json()["items"]] == [body["id"]]
    one = await platform.client.get(f"/api/notifications/deliveries/{body['id']}", headers=platform.headers)
    assert one.status_code == 200 and one.json()["attempt_log"][0]["status_code"] == 200


def test_signature_format() -> None:
    header = sign("key", 1700000000, b'{"a":1}')
    assert header.startswith("t=1700000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify_signature(header, b'{"a":1}', "key")


async def test_the_test_body_as_multipart_and_text(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/ok", secret=None)
    )
    form = await platform.client.post(
        "/api/notifications/test", files={"channel_id": (None, channel["id"])}, headers=platform.headers
    )
    assert form.status_code == 200, form.text
    text = await platform.client.post(
        "/api/notifications/test",
        content=json.dumps({"channel_id": channel["id"]}),
        headers={**platform.headers, "Content-Type": "text/plain"},
    )
    assert text.status_code == 200, text.text
    assert "x-parley-signature" not in receiver.at("/hook/ok")[-1].headers
    empty = await platform.client.post("/api/notifications/test", json={}, headers=platform.headers)
    assert empty.status_code == 422
    unknown = await platform.client.post(
        "/api/notifications/test", json={"channel_id": "nch_missing"}, headers=platform.headers
    )
    assert unknown.status_code == 404


async def test_a_refused_test_is_502_with_the_reason_and_logged(
    platform: Platform, receiver: Receiver
) -> None:
    channel = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/status/400")
    )
    status, body = await _test(platform, channel["id"])
    assert status == 502
    assert body["code"] == "notification_failed"
    assert "HTTP 400" in str(body["detail"]) and "invalid_payload" in str(body["detail"])
    delivery = body["delivery"]
    assert delivery["status"] == "failed" and delivery["delivered"] is False  # type: ignore[index]
    assert delivery["attempt_log"][0]["outcome"] == "permanent"  # type: ignore[index]
    # The failed test is in the log: the 502 did not roll it back.
    failed = await platform.client.get(
        "/api/notifications/deliveries", params={"status": "failed"}, headers=platform.headers
    )
    assert delivery["id"] in [d["id"] for d in failed.json()["items"]]  # type: ignore[index]


async def test_a_redirect_is_not_followed(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/redirect")
    )
    before = len(receiver.at("/hook/ok"))
    status, body = await _test(platform, channel["id"])
    assert status == 502 and "redirected" in str(body["detail"])
    assert len(receiver.at("/hook/ok")) == before


async def test_a_slow_receiver_is_504(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}/hook/slow"))
    status, body = await _test(platform, channel["id"])
    assert status == 504 and body["code"] == "notification_timeout"
    assert body["delivery"]["attempt_log"][0]["outcome"] == "transient"  # type: ignore[index]


async def test_an_unreachable_receiver_is_502(platform: Platform) -> None:
    from tests.live import free_port

    channel = await create_channel(
        platform.client, platform.headers, webhook(f"http://127.0.0.1:{free_port()}/hook")
    )
    status, body = await _test(platform, channel["id"])
    assert status == 502 and "cannot be reached" in str(body["detail"])


async def test_the_guard_applies_again_at_send_time(
    make_platform: PlatformFactory, receiver: Receiver
) -> None:
    allowed = await make_platform(outbound_allowlist=["127.0.0.1"])
    channel = await create_channel(allowed.client, allowed.headers, webhook(f"{receiver.url}/hook/ok"))
    before = len(receiver.at("/hook/ok"))
    closed = await make_platform()  # the operator removed loopback from the allow-list
    status, body = await _test(closed, channel["id"])
    assert status == 502 and "non-public address" in str(body["detail"])
    assert len(receiver.at("/hook/ok")) == before


async def test_slack_test_message(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(
        platform.client,
        platform.headers,
        {"name": "Slack", "type": "slack", "webhook_url": f"{receiver.url}{SLACK_PATH}"},
    )
    before = len(receiver.at(SLACK_PATH))
    status, body = await _test(platform, channel["id"])
    assert status == 200, body
    request = receiver.at(SLACK_PATH)[before]
    data = json.loads(request.body)
    assert data["text"].startswith("Parley test notification")
    assert data["blocks"][0]["type"] == "header"
    assert "x-parley-signature" not in request.headers


async def test_email_test_message_with_auth(platform: Platform, smtp_server: Mailbox) -> None:
    channel = await create_channel(platform.client, platform.headers, email(smtp_server))
    before, logins = len(smtp_server.messages), len(smtp_server.logins)
    status, body = await _test(platform, channel["id"])
    assert status == 200, body
    assert body["last_status_code"] == 250
    assert len(smtp_server.logins) == logins + 1
    sender, recipients, message = smtp_server.messages[before]
    assert sender == "parley@example.com"
    assert recipients == ["ops@example.com", "boss@example.com"]
    assert message["Subject"] == "Parley test notification"
    assert message["To"] == "ops@example.com, boss@example.com"
    assert str(body["id"]) in message["Message-ID"] and message["X-Parley-Delivery"] == body["id"]
    assert "If you can read it" in message.get_payload(decode=True).decode()  # type: ignore[union-attr]


async def test_email_with_a_wrong_password_is_a_permanent_failure(
    platform: Platform, smtp_server: Mailbox
) -> None:
    channel = await create_channel(
        platform.client, platform.headers, email(smtp_server, password="wrong-password")
    )
    status, body = await _test(platform, channel["id"])
    assert status == 502
    assert body["delivery"]["last_status_code"] == 535  # type: ignore[index]
    assert body["delivery"]["attempt_log"][0]["outcome"] == "permanent"  # type: ignore[index]


async def test_email_recipient_codes_decide_retry(platform: Platform, smtp_server: Mailbox) -> None:
    full = await create_channel(
        platform.client, platform.headers, email(smtp_server, name="full", to=["full@example.com"])
    )
    status, body = await _test(platform, full["id"])
    assert status == 502 and body["delivery"]["attempt_log"][0]["outcome"] == "transient"  # type: ignore[index]
    gone = await create_channel(
        platform.client, platform.headers, email(smtp_server, name="gone", to=["nobody@example.com"])
    )
    status, body = await _test(platform, gone["id"])
    assert status == 502 and body["delivery"]["attempt_log"][0]["outcome"] == "permanent"  # type: ignore[index]
    partial = await create_channel(
        platform.client,
        platform.headers,
        email(smtp_server, name="partial", to=["nobody@example.com", "ops@example.com"]),
    )
    status, body = await _test(platform, partial["id"])
    assert status == 200 and "1 of 2" in str(body["attempt_log"][0]["detail"])  # type: ignore[index]
