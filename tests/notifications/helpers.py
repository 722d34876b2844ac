from __future__ import annotations

import hashlib
import hmac
from typing import Any

import httpx

from tests.notifications.conftest import SMTP_PASSWORD, SMTP_USER, Mailbox

SECRET = "whsec_test_secret_1234"


def webhook(url: str, *, name: str = "Ops webhook", secret: str | None = SECRET) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "type": "webhook", "url": url}
    if secret:
        body["secret"] = secret
    return body


def email(
    box: Mailbox, *, name: str = "Ops mail", password: str | None = SMTP_PASSWORD, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "type": "email",
        "smtp_host": box.host,
        "smtp_port": box.port,
        "smtp_security": "none",
        "from_address": "parley@example.com",
        "to": ["ops@example.com", "boss@example.com"],
        **extra,
    }
    if password is not None:
        body["smtp_username"] = SMTP_USER
        body["smtp_password"] = password
    return body


async def create_channel(
    client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]
) -> dict[str, Any]:
    response = await client.post("/api/notifications/channels", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def create_rule(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/api/notifications/rules", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def verify_signature(header: str, body: bytes, secret: str = SECRET) -> bool:
    """What a receiver does: recompute HMAC-SHA256 over "<t>." + body and compare in constant time."""
    parts = dict(item.split("=", 1) for item in header.split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])
