"""Sending one message through one channel, and telling transient failures from permanent ones.

Each sender returns a :class:`SendResult`; none raises for a delivery problem. ``transient`` failures
(HTTP 408/425/429/5xx, time-outs, connection errors, SMTP 4xx) are worth retrying; ``permanent`` ones
(other HTTP 4xx, redirects, SMTP 5xx, refused destinations) are not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Literal

import aiosmtplib
import orjson

from parley.kit.delivery import Outcome, excerpt, post_once
from parley.kit.outbound import OutboundPolicy
from parley.kit.signing import SIGNATURE_HEADER, sign
from parley.notifications.destinations import DestinationRefused, open_guarded_socket

DELIVERY_HEADER = "X-Parley-Delivery"
EVENT_HEADER = "X-Parley-Event"
USER_AGENT = "Parley-Notifications/1.0"


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    status_code: int | None
    detail: str
    duration_ms: float = 0.0
    timed_out: bool = False


@dataclass(frozen=True)
class WebhookTarget:
    url: str
    secret: str | None


@dataclass(frozen=True)
class SlackTarget:
    webhook_url: str


@dataclass(frozen=True)
class EmailTarget:
    host: str
    port: int
    security: Literal["none", "starttls", "ssl"]
    username: str | None
    password: str | None
    from_address: str
    to: list[str]


Target = WebhookTarget | SlackTarget | EmailTarget


async def _post(
    policy: OutboundPolicy, url: str, body: bytes, headers: dict[str, str], seconds: float
) -> SendResult:
    posted = await post_once(policy, url, body, headers, seconds)
    status = posted.status_code
    if posted.outcome == "delivered":
        detail = f"Accepted with HTTP {status}."
    elif posted.reason is not None:
        detail = posted.reason
    else:
        said = f": {excerpt(posted.text)}" if posted.text.strip() else ""
        detail = f"The receiver answered HTTP {status}{said}"
    return SendResult(posted.outcome, status, detail, timed_out=posted.timed_out)


async def send_webhook(
    policy: OutboundPolicy,
    target: WebhookTarget,
    payload: dict[str, Any],
    *,
    delivery_id: str,
    event: str,
    seconds: float,
) -> SendResult:
    body = orjson.dumps(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event,
    }
    if target.secret:
        headers[SIGNATURE_HEADER] = sign(target.secret, int(time.time()), body)
    return await _post(policy, target.url, body, headers, seconds)


def slack_body(title: str, text: str, link: str | None) -> dict[str, Any]:
    """Slack's incoming-webhook shape: ``text`` (fallback and notifications) and Block Kit blocks."""
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}},
    ]
    if link:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{link}|Open in Parley>"}]}
        )
    return {"text": f"{title}\n{text}"[:3000], "blocks": blocks}


async def send_slack(
    policy: OutboundPolicy, target: SlackTarget, title: str, text: str, link: str | None, *, seconds: float
) -> SendResult:
    body = orjson.dumps(slack_body(title, text, link))
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    return await _post(policy, target.webhook_url, body, headers, seconds)


def email_message(target: EmailTarget, title: str, text: str, delivery_id: str, domain: str) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = title
    message["From"] = target.from_address
    message["To"] = ", ".join(target.to)
    message["Date"] = formatdate(localtime=False)
    # The same id on every attempt lets mail systems drop a duplicate after a retry.
    message["Message-ID"] = make_msgid(idstring=delivery_id, domain=domain)
    message[DELIVERY_HEADER] = delivery_id
    message.set_content(text)
    return message


def _smtp_outcome(code: int) -> Outcome:
    return "transient" if 400 <= code < 500 else "permanent"


async def send_email(
    policy: OutboundPolicy,
    target: EmailTarget,
    title: str,
    text: str,
    *,
    delivery_id: str,
    local_hostname: str,
    seconds: float,
) -> SendResult:
    message = email_message(target, title, text, delivery_id, local_hostname)
    try:
        sock = await open_guarded_socket(policy, target.host, target.port, seconds)
    except DestinationRefused as exc:
        return SendResult("permanent", None, str(exc))
    except TimeoutError:
        return SendResult("transient", None, "The mail server did not answer in time.", timed_out=True)
    except OSError:
        return SendResult(
            "transient", None, f"The mail server {target.host}:{target.port} cannot be reached."
        )
    smtp = aiosmtplib.SMTP(
        hostname=target.host,
        sock=sock,
        use_tls=target.security == "ssl",
        start_tls=target.security == "starttls",
        timeout=seconds,
        local_hostname=local_hostname,
    )
    try:
        async with smtp:
            if target.username and target.password is not None:
                await smtp.login(target.username, target.password)
            refused, reply = await smtp.send_message(message)
    except aiosmtplib.SMTPRecipientsRefused as exc:
        codes = [r.code for r in exc.recipients]
        outcome: Outcome = "transient" if all(400 <= c < 500 for c in codes) else "permanent"
        return SendResult(outcome, codes[0] if codes else None, "The mail server refused every recipient.")
    except aiosmtplib.SMTPResponseException as exc:
        return SendResult(
            _smtp_outcome(exc.code), exc.code, f"The mail server answered {exc.code}: {excerpt(exc.message)}"
        )
    except aiosmtplib.SMTPTimeoutError:
        return SendResult("transient", None, "The mail server did not answer in time.", timed_out=True)
    except aiosmtplib.SMTPNotSupported as exc:
        return SendResult("permanent", None, f"The mail server does not support this: {excerpt(str(exc))}")
    except (aiosmtplib.SMTPException, OSError):
        return SendResult("transient", None, "The connection to the mail server failed.")
    finally:
        sock.close()
    if refused:
        return SendResult(
            "delivered", 250, f"Accepted for {len(target.to) - len(refused)} of {len(target.to)} recipients."
        )
    return SendResult("delivered", 250, f"Accepted by the mail server: {excerpt(reply)}")
