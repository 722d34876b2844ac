"""Channels and rules: CRUD, secrets encrypted and masked, the SSRF guard at save time, tenancy."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings, prepare_settings
from parley.kit.crypto import SecretBox, SecretDecryptionError
from parley.notifications.models import NotificationChannel
from tests.conftest import auth, make_token
from tests.notifications.conftest import SMTP_PASSWORD, Mailbox, Platform, PlatformFactory, Receiver
from tests.notifications.helpers import SECRET, create_channel, create_rule, email, webhook
from tests.organizations.test_router import create_org

SLACK_URL_PATH = "/services/T000/B000/abcdefghijklmnop"


async def test_webhook_channel_crud_keeps_the_secret_encrypted_and_masked(
    platform: Platform, receiver: Receiver, db_session: AsyncSession, settings: Settings
) -> None:
    client, headers = platform.client, platform.headers
    channel = await create_channel(client, headers, webhook(f"{receiver.url}/hook/ok"))
    assert channel["id"].startswith("nch_")
    assert channel["type"] == "webhook" and channel["enabled"] is True
    assert channel["url"] == f"{receiver.url}/hook/ok"
    assert channel["secret"] == "••••" + SECRET[-4:]
    assert (
        SECRET not in (await client.get(f"/api/notifications/channels/{channel['id']}", headers=headers)).text
    )

    row = await db_session.scalar(select(NotificationChannel).where(NotificationChannel.id == channel["id"]))
    assert row is not None and SECRET not in str(row.secrets) and SECRET not in str(row.config)
    box = SecretBox(prepare_settings(settings.model_copy()).secret_key_bytes())
    assert box.decrypt(row.secrets["secret"], bound_to=f"notification_channels:{row.id}:secret") == SECRET

    listed = (await client.get("/api/notifications/channels?type=webhook", headers=headers)).json()
    assert [c["id"] for c in listed["items"]] == [channel["id"]]
    assert (await client.get("/api/notifications/channels?type=email", headers=headers)).json()["items"] == []

    patched = await client.patch(
        f"/api/notifications/channels/{channel['id']}",
        json={"name": "Renamed", "enabled": False, "secret": None},
        headers=headers,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["name"] == "Renamed" and patched.json()["enabled"] is False
    assert patched.json()["secret"] is None

    duplicate = await client.post(
        "/api/notifications/channels",
        json=webhook(f"{receiver.url}/hook/ok", name="Renamed"),
        headers=headers,
    )
    assert duplicate.status_code == 409

    deleted = await client.delete(f"/api/notifications/channels/{channel['id']}", headers=headers)
    assert deleted.status_code == 200 and deleted.json() == {"id": channel["id"], "deleted": True}
    assert (
        await client.get(f"/api/notifications/channels/{channel['id']}", headers=headers)
    ).status_code == 404


async def test_secrets_are_bound_to_their_row(
    platform: Platform, receiver: Receiver, db_session: AsyncSession, settings: Settings
) -> None:
    first = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/ok", name="a")
    )
    second = await create_channel(
        platform.client, platform.headers, webhook(f"{receiver.url}/hook/ok", name="b")
    )
    rows = {
        r.id: r
        for r in await db_session.scalars(
            select(NotificationChannel).where(NotificationChannel.id.in_([first["id"], second["id"]]))
        )
    }
    box = SecretBox(prepare_settings(settings.model_copy()).secret_key_bytes())
    with pytest.raises(SecretDecryptionError):
        box.decrypt(
            rows[first["id"]].secrets["secret"], bound_to=f"notification_channels:{second['id']}:secret"
        )


async def test_email_and_slack_channels(platform: Platform, receiver: Receiver, smtp_server: Mailbox) -> None:
    client, headers = platform.client, platform.headers
    mail = await create_channel(client, headers, email(smtp_server))
    assert mail["smtp_host"] == "127.0.0.1" and mail["smtp_port"] == smtp_server.port
    assert mail["smtp_password"] == "••••" + SMTP_PASSWORD[-4:]
    assert mail["to"] == ["ops@example.com", "boss@example.com"]
    slack_url = f"{receiver.url}{SLACK_URL_PATH}"
    slack = await create_channel(
        client, headers, {"name": "Slack", "type": "slack", "webhook_url": slack_url}
    )
    assert slack["webhook_url"] == "••••" + slack_url[-4:]
    assert slack_url not in str(slack)

    defaults = await client.post(
        "/api/notifications/channels",
        json={
            "name": "Mail defaults",
            "type": "email",
            "smtp_host": "127.0.0.1",
            "from_address": "a@example.com",
            "to": ["b@example.com"],
        },
        headers=headers,
    )
    assert defaults.status_code == 200, defaults.text
    assert defaults.json()["smtp_security"] == "starttls" and defaults.json()["smtp_port"] == 587


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "type": "webhook"}, "url"),
        ({"name": "x", "type": "webhook", "url": "ftp://example.com/hook"}, "url"),
        ({"name": "x", "type": "webhook", "url": "https://example.com/h", "to": ["a@example.com"]}, "to"),
        (
            {"name": "x", "type": "slack", "webhook_url": "https://example.com/hook", "secret": "abc"},
            "secret",
        ),
        (
            {"name": "x", "type": "email", "smtp_host": "mail.example.com", "from_address": "a@example.com"},
            "to",
        ),
        (
            {
                "name": "x",
                "type": "email",
                "smtp_host": "m.example.com",
                "from_address": "a@example.com",
                "to": ["bad\r\nBcc: x@y.z"],
            },
            "to",
        ),
        ({"name": "x", "type": "sms", "url": "https://example.com/h"}, "type"),
    ],
)
async def test_bad_channel_bodies_are_422(platform: Platform, body: dict[str, object], field: str) -> None:
    response = await platform.client.post("/api/notifications/channels", json=body, headers=platform.headers)
    assert response.status_code == 422, response.text
    assert field in response.text


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (webhook("http://169.254.169.254/latest/meta-data/"), "url", "169.254.169.254"),
        (webhook("http://127.0.0.1:9/hook"), "url", "non-public address (127.0.0.1)"),
        (webhook("http://[::1]:8080/hook"), "url", "non-public address"),
        (webhook("http://redis:6379/"), "url", "internal name"),
        (webhook("https://metadata.google.internal/computeMetadata/v1/"), "url", "internal name"),
        (webhook("http://10.0.0.8/hook"), "url", "10.0.0.8"),
        (
            {
                "name": "m",
                "type": "email",
                "smtp_host": "192.168.1.20",
                "from_address": "a@example.com",
                "to": ["b@example.com"],
            },
            "smtp_host",
            "192.168.1.20",
        ),
        (
            {"name": "s", "type": "slack", "webhook_url": "https://evil.example.com/services/T/B/X"},
            "webhook_url",
            "hooks.slack.com",
        ),
        (
            {"name": "s", "type": "slack", "webhook_url": "http://hooks.slack.com/services/T/B/X"},
            "webhook_url",
            "https",
        ),
    ],
)
async def test_the_ssrf_guard_refuses_internal_destinations_at_save_time(
    make_platform: PlatformFactory, body: dict[str, object], field: str, says: str
) -> None:
    platform = await make_platform()  # nothing allow-listed: the production default
    response = await platform.client.post("/api/notifications/channels", json=body, headers=platform.headers)
    assert response.status_code == 422, response.text
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", field]
    assert says in error["msg"]


async def test_ssrf_guard_also_applies_when_a_channel_is_changed(
    make_platform: PlatformFactory, receiver: Receiver
) -> None:
    allowed = await make_platform(outbound_allowlist=["127.0.0.1"])
    channel = await create_channel(allowed.client, allowed.headers, webhook(f"{receiver.url}/hook/ok"))
    response = await allowed.client.patch(
        f"/api/notifications/channels/{channel['id']}",
        json={"url": "http://169.254.169.254/latest"},
        headers=allowed.headers,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "url"]
    wrong_field = await allowed.client.patch(
        f"/api/notifications/channels/{channel['id']}",
        json={"smtp_host": "mail.example.com"},
        headers=allowed.headers,
    )
    assert wrong_field.status_code == 422


async def test_channel_bodies_as_multipart_and_text(
    platform: Platform, receiver: Receiver, smtp_server: Mailbox
) -> None:
    form = await platform.client.post(
        "/api/notifications/channels",
        files={
            "name": (None, "Form mail"),
            "type": (None, "email"),
            "smtp_host": (None, "127.0.0.1"),
            "smtp_port": (None, str(smtp_server.port)),
            "smtp_security": (None, "none"),
            "from_address": (None, "parley@example.com"),
            "to": (None, '["a@example.com", "b@example.com"]'),
        },
        headers=platform.headers,
    )
    assert form.status_code == 200, form.text
    assert form.json()["to"] == ["a@example.com", "b@example.com"]
    text = await platform.client.post(
        "/api/notifications/channels",
        content=f'{{"name": "Text hook", "type": "webhook", "url": "{receiver.url}/hook/ok"}}',
        headers={**platform.headers, "Content-Type": "text/plain"},
    )
    assert text.status_code == 200, text.text


async def test_rules_crud_and_references(platform: Platform, receiver: Receiver) -> None:
    client, headers = platform.client, platform.headers
    channel = await create_channel(client, headers, webhook(f"{receiver.url}/hook/ok"))
    rule = await create_rule(
        client,
        headers,
        signal_type="order_not_found",
        min_severity="medium",
        channel_id=channel["id"],
        throttle_minutes=15,
    )
    assert rule["id"].startswith("nrl_") and rule["enabled"] is True and rule["throttle_minutes"] == 15

    missing = await client.post(
        "/api/notifications/rules", json={"signal_type": "*", "channel_id": "nch_nope"}, headers=headers
    )
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "channel_id"]
    bad_type = await client.post(
        "/api/notifications/rules",
        json={"signal_type": "Order Not Found", "channel_id": channel["id"]},
        headers=headers,
    )
    assert bad_type.status_code == 422

    in_use = await client.delete(f"/api/notifications/channels/{channel['id']}", headers=headers)
    assert in_use.status_code == 409 and rule["id"] in in_use.json()["detail"]

    patched = await client.patch(
        f"/api/notifications/rules/{rule['id']}",
        json={"signal_type": "*", "enabled": False, "throttle_minutes": 0},
        headers=headers,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["signal_type"] == "*" and patched.json()["throttle_minutes"] is None
    listed = (
        await client.get(f"/api/notifications/rules?channel_id={channel['id']}", headers=headers)
    ).json()
    assert [r["id"] for r in listed["items"]] == [rule["id"]]

    assert (await client.delete(f"/api/notifications/rules/{rule['id']}", headers=headers)).status_code == 200
    assert (await client.get(f"/api/notifications/rules/{rule['id']}", headers=headers)).status_code == 404
    assert (
        await client.delete(f"/api/notifications/channels/{channel['id']}", headers=headers)
    ).status_code == 200


async def test_another_organization_sees_nothing(platform: Platform, receiver: Receiver) -> None:
    channel = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}/hook/ok"))
    bob = make_token("bob", name="Bob")
    other = await create_org(platform.client, bob, name="Other shop")
    headers = auth(bob, str(other["id"]))
    assert (
        await platform.client.get(f"/api/notifications/channels/{channel['id']}", headers=headers)
    ).status_code == 404
    assert (await platform.client.get("/api/notifications/channels", headers=headers)).json()["items"] == []
    test = await platform.client.post(
        "/api/notifications/test", json={"channel_id": channel["id"]}, headers=headers
    )
    assert test.status_code == 404
    rule = await platform.client.post(
        "/api/notifications/rules", json={"signal_type": "*", "channel_id": channel["id"]}, headers=headers
    )
    assert rule.status_code == 422
    assert receiver.at("/hook/ok") == [] or all(
        r.headers.get("x-parley-delivery") for r in receiver.at("/hook/ok")
    )


async def test_viewers_cannot_change_channels(platform: Platform, receiver: Receiver) -> None:
    response = await platform.client.post(
        "/api/notifications/channels",
        json=webhook(f"{receiver.url}/hook/ok"),
        headers=auth(make_token("carol"), platform.org),
    )
    assert response.status_code in (403, 404)


async def test_unauthenticated_is_401(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/notifications/channels")).status_code == 401
