"""The WhatsApp Cloud API: webhook verification and signatures, inbound messages as session turns,
and replies through the Graph API.

Flow of one message: the webhook checks ``X-Hub-Signature-256`` (HMAC-SHA256 of the raw body with the
account's app secret), stores the message once per ``wamid`` (a replayed webhook is a duplicate) and
answers 200 at once. A background job (:data:`INBOUND_JOB`) then runs the turn: it continues the
sender's open session on that account or starts one for the routed flow, stores the agent's replies as
pending outbound messages in the same transaction, and sends them in order with
``POST {base}/{version}/{phone_number_id}/messages``. Transient Graph failures (network, 429, 5xx,
throttling codes) are retried with backoff; permanent ones are recorded on the message and logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from dataclasses import dataclass

import httpx
import orjson
import structlog
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.identity import system_context
from parley.auth.principal import OrgContext
from parley.channels import routing, service
from parley.channels.models import WhatsAppAccount, WhatsAppMessage
from parley.channels.schemas import WebhookAck, WebhookMessage, WebhookPayload
from parley.config import Settings
from parley.kit.crypto import constant_time_equals, sha256_hex
from parley.kit.db import utcnow
from parley.kit.errors import BadRequest, Forbidden, ParleyError
from parley.kit.ids import new_id
from parley.kit.jobs import JobContext, JobQueue, enqueue_after_commit
from parley.kit.outbound import (
    BlockedDestination,
    explain,
    guarded_client,
    outbound_policy,
    read_limited,
)
from parley.privacy import service as privacy
from parley.sessions import service as sessions
from parley.sessions.models import ConversationSession
from parley.sessions.schemas import MAX_MESSAGE_CHARS, SessionCreate

log = structlog.get_logger("parley.channels.whatsapp")

INBOUND_JOB = "channels.whatsapp.inbound"
SEND_JOB = "channels.whatsapp.send"
MAX_TEXT = 4096  # the Cloud API's limit for a text message body
DEFAULT_UNSUPPORTED_REPLY = "Sorry, I can only read text messages. Please write your request as text."
# Graph error codes that mean "try again later": rate limits, throttling, temporary service errors.
TRANSIENT_CODES = frozenset({1, 2, 4, 17, 341, 80007, 130429, 131000, 131016, 131048, 131056})


# --- verification ------------------------------------------------------------------------------------


def signature_of(raw: bytes, app_secret: str) -> str:
    """The ``X-Hub-Signature-256`` header Meta sends for ``raw``: ``sha256=<hex HMAC>``."""
    return "sha256=" + hmac.new(app_secret.encode(), raw, hashlib.sha256).hexdigest()


def signature_valid(raw: bytes, header: str | None, app_secret: str) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    return constant_time_equals(signature_of(raw, app_secret), header.strip())


async def verify_subscription(
    session: AsyncSession, settings: Settings, mode: str | None, token: str | None, challenge: str | None
) -> str:
    """Meta's ``GET`` handshake: answer ``hub.challenge`` when ``hub.verify_token`` is an account's."""
    if mode is None or token is None or challenge is None:
        raise BadRequest("Send hub.mode, hub.verify_token and hub.challenge, as Meta does when verifying.")
    if mode != "subscribe":
        raise BadRequest("hub.mode must be 'subscribe'.")
    candidates = (
        await session.scalars(
            select(WhatsAppAccount).where(WhatsAppAccount.verify_token_sha256 == sha256_hex(token))
        )
    ).all()
    for account in candidates:
        stored = service.account_secrets(settings, account).get("verify_token")
        if stored is not None and constant_time_equals(stored, token):
            log.info("whatsapp_webhook_verified", account_id=account.id)
            return challenge
    log.warning("whatsapp_webhook_verify_rejected")
    raise Forbidden("The verify token does not match any WhatsApp account.")


# --- receiving ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inbound:
    account: WhatsAppAccount
    message: WebhookMessage


def _text_of(message: WebhookMessage) -> str | None:
    """The text of a message Parley can answer: text, a quick-reply button, an interactive reply."""
    if message.type == "text" and message.text is not None:
        return message.text.body
    if message.type == "button" and isinstance(message.button, dict):
        text = message.button.get("text") or message.button.get("payload")
        return str(text) if text else None
    if message.type == "interactive" and isinstance(message.interactive, dict):
        for key in ("button_reply", "list_reply"):
            reply = message.interactive.get(key)
            if isinstance(reply, dict) and reply.get("title"):
                return str(reply["title"])
    return None


def _clean(value: str | None) -> str | None:
    """Text as stored: NUL characters (which PostgreSQL text cannot hold) are dropped."""
    return value.replace("\x00", "") if value is not None else None


def _parse(raw: bytes) -> WebhookPayload:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest("The webhook body is not JSON.") from exc
    try:
        return WebhookPayload.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(
            "The webhook body is not a WhatsApp Business Account notification "
            "(object, entry[].changes[].value)."
        ) from exc


async def receive(
    session: AsyncSession, settings: Settings, jobs: JobQueue, raw: bytes, signature: str | None
) -> WebhookAck:
    """Check, store once and queue the messages of one webhook delivery; see the module doc."""
    if not signature or not signature.startswith("sha256="):
        raise Forbidden("The X-Hub-Signature-256 header is missing or malformed.")
    payload = _parse(raw)
    ignored = 0
    accounts: dict[str, WhatsAppAccount | None] = {}
    pending: list[Inbound] = []
    for entry in payload.entry:
        for change in entry.changes:
            value = change.value
            if value is None or value.metadata is None or payload.object != "whatsapp_business_account":
                ignored += 1
                continue
            number = value.metadata.phone_number_id
            if number not in accounts:
                accounts[number] = await session.scalar(
                    select(WhatsAppAccount).where(WhatsAppAccount.phone_number_id == number)
                )
            account = accounts[number]
            if account is None:
                # Meta retries every non-200, so an unknown number is acknowledged and only logged.
                log.warning("whatsapp_unknown_phone_number", phone_number_id=number)
                ignored += 1
                continue
            if not value.messages:
                ignored += 1  # delivery statuses and other events: nothing to answer
            pending.extend(Inbound(account, message) for message in value.messages)

    # Every account named in the delivery must vouch for the signature before anything is stored.
    for account in {a.id: a for a in accounts.values() if a is not None}.values():
        secret = service.account_secrets(settings, account).get("app_secret")
        if secret is None or not signature_valid(raw, signature, secret):
            log.warning("whatsapp_signature_rejected", account_id=account.id)
            raise Forbidden("The X-Hub-Signature-256 signature does not match the body.")

    received = duplicates = 0
    seen: set[tuple[str, str]] = set()
    for item in pending:
        key = (item.account.id, _clean(item.message.id) or "")
        exists = key in seen or (
            await session.scalar(
                select(WhatsAppMessage.id).where(
                    WhatsAppMessage.account_id == item.account.id, WhatsAppMessage.wamid == key[1]
                )
            )
        )
        seen.add(key)
        if exists:
            duplicates += 1
            continue
        text = _clean(_text_of(item.message))
        row = WhatsAppMessage(
            id=new_id("wam"),
            organization_id=item.account.organization_id,
            account_id=item.account.id,
            direction="in",
            wamid=key[1],
            wa_id=_clean(item.message.from_) or "unknown",
            type=(_clean(item.message.type) or "unknown")[:20],
            text=text,
            status="received",
            position=0,
            attempts=0,
        )
        try:
            async with session.begin_nested():
                session.add(row)
                await session.flush()
        except IntegrityError:  # the same delivery arrived concurrently
            duplicates += 1
            continue
        received += 1
        enqueue_after_commit(session, jobs, INBOUND_JOB, {"message_id": row.id})
    if received or duplicates:
        log.info("whatsapp_webhook_received", received=received, duplicates=duplicates)
    return WebhookAck(received=received, duplicates=duplicates, ignored=ignored)


# --- the turn ------------------------------------------------------------------------------------


def _context(account: WhatsAppAccount) -> OrgContext:
    # The account's conversations are the platform acting for its organization, as that account.
    return system_context(account.organization_id, actor=account.id, name="WhatsApp")


def _chunks(text: str) -> list[str]:
    text = text.strip()
    return [text[i : i + MAX_TEXT] for i in range(0, len(text), MAX_TEXT)] if text else []


async def open_session_id(session: AsyncSession, account_id: str, wa_id: str) -> str | None:
    """The sender's conversation on this account that is still going, if any."""
    return await session.scalar(
        select(ConversationSession.id)
        .join(WhatsAppMessage, WhatsAppMessage.session_id == ConversationSession.id)
        .where(
            WhatsAppMessage.account_id == account_id,
            WhatsAppMessage.wa_id == wa_id,
            WhatsAppMessage.direction == "in",
            ConversationSession.status == "active",
        )
        .order_by(WhatsAppMessage.created_at.desc())
        .limit(1)
    )


async def _turn(
    context: JobContext,
    message_id: str,
    account: WhatsAppAccount,
    text: str,
    open_id: str | None,
) -> tuple[str | None, list[str], str, str | None]:
    """Answer one inbound message: (session id, reply texts, status, error).

    Each step commits through a unit of work of its own and every turn runs with no transaction
    open. The replies of the last turn are stored by :func:`answer` in that turn's unit.
    """
    settings: Settings = context.settings
    org = _context(account)
    if open_id is not None:
        try:
            async with context.unit() as session:
                row, result = await sessions.send_message(session, settings, org, open_id, text)
                await _finish_message(session, message_id, account, row.id, [result.text])
            return row.id, [result.text], "processed", None
        except sessions.SessionEnded:
            pass  # it ended meanwhile (idle sweeper): the message starts a new conversation
    async with context.unit(write=False) as reader:
        flow_id = await routing.resolve_flow(
            reader, account.organization_id, kind="whatsapp", address=account.id
        )
    if flow_id is None:
        log.warning("whatsapp_no_route", account_id=account.id, message_id=message_id)
        return None, [], "ignored", "No route answers this WhatsApp account now."
    async with context.unit() as session:
        message = await session.get(WhatsAppMessage, message_id)
        if message is None or message.status != "received":
            return None, [], "skipped", None
        data = SessionCreate(
            flow_id=flow_id,
            channel="whatsapp",
            caller=message.wa_id,
            callee=account.display_phone_number[:40],
        )
        row, opening = await sessions.create_session(session, settings, org, data)
        # Linked at once: a retry after a crash continues this session instead of starting another.
        message.session_id = row.id
        if row.status != "active":
            await _finish_message(session, message_id, account, row.id, [opening.text])
            return row.id, [opening.text], "processed", None
    async with context.unit() as session:
        row, result = await sessions.send_message(session, settings, org, row.id, text)
        await _finish_message(session, message_id, account, row.id, [opening.text, result.text])
    return row.id, [opening.text, result.text], "processed", None


async def _finish_message(
    session: AsyncSession,
    message_id: str,
    account: WhatsAppAccount,
    session_id: str | None,
    replies: list[str],
    status: str = "processed",
    error: str | None = None,
) -> None:
    """Store the replies as pending outbound messages and mark the inbound one, in ``session``."""
    message = await session.get(WhatsAppMessage, message_id)
    if message is None:
        return
    chunks = [chunk for reply in replies for chunk in _chunks(reply)]
    session.add_all(
        WhatsAppMessage(
            id=new_id("wam"),
            organization_id=account.organization_id,
            account_id=account.id,
            direction="out",
            wa_id=message.wa_id,
            type="text",
            text=chunk,
            status="pending",
            session_id=session_id,
            reply_to_id=message.id,
            position=position,
            attempts=0,
        )
        for position, chunk in enumerate(chunks)
    )
    message.status, message.session_id, message.error = status, session_id, error
    message.processed_at = utcnow()
    # With redaction on, the caller's words are kept only until the conversation has read them (the
    # message is the queue the answering job works from); the replies, once they are sent.
    redactor = await privacy.redactor_for(session, account.organization_id)
    if redactor is not None and message.text:
        message.text = redactor.text(message.text)
    await session.flush()


async def answer(context: JobContext, message_id: str, account_id: str, open_id: str | None) -> bool:
    """The turn, with its pending replies committed in the turn's unit; False when nothing to do."""
    async with context.unit(write=False) as reader:
        message = await reader.get(WhatsAppMessage, message_id)
        account = await reader.get(WhatsAppAccount, account_id)
        if message is None or account is None or message.status != "received":
            return False
        text = message.text
    if text is None:
        async with context.unit() as session:
            reply = account.unsupported_reply or DEFAULT_UNSUPPORTED_REPLY
            await _finish_message(session, message_id, account, None, [reply])
        return True
    _, _, status, error = await _turn(context, message_id, account, text[:MAX_MESSAGE_CHARS], open_id)
    if status == "skipped":
        return False
    if status != "processed":
        async with context.unit() as session:
            await _finish_message(session, message_id, account, None, [], status, error)
    return True


# --- sending -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendOutcome:
    ok: bool
    transient: bool
    wamid: str | None = None
    error: str | None = None


def _graph_error(response: httpx.Response, body: bytes) -> SendOutcome:
    code: int | None = None
    detail = ""
    try:
        error = orjson.loads(body).get("error") or {}
        code = int(error["code"]) if "code" in error else None
        detail = str(error.get("message") or "")[:200]
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        pass
    transient = response.status_code == 429 or response.status_code >= 500 or code in TRANSIENT_CODES
    text = f"Graph API answered {response.status_code}" + (f" (code {code})" if code is not None else "")
    return SendOutcome(False, transient, error=f"{text}: {detail}" if detail else text)


async def send_text(
    client: httpx.AsyncClient, settings: Settings, phone_number_id: str, token: str, to: str, text: str
) -> SendOutcome:
    """One ``POST /{version}/{phone_number_id}/messages`` with a text body."""
    url = f"{settings.whatsapp_graph_url.rstrip('/')}/{settings.whatsapp_graph_version}/{phone_number_id}/messages"
    body = {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": to,
        "type": "text",
        "text": {"preview_url": False, "body": text},
    }
    try:
        async with client.stream(
            "POST", url, json=body, headers={"Authorization": f"Bearer {token}"}
        ) as response:
            raw = await read_limited(response, 64 * 1024)
    except BlockedDestination as exc:
        return SendOutcome(False, False, error=str(exc))
    except httpx.HTTPError as exc:
        return SendOutcome(False, True, error=explain(exc))
    except ParleyError as exc:  # an oversized answer
        return SendOutcome(False, False, error=exc.detail)
    if response.status_code != 200:
        return _graph_error(response, raw)
    try:
        wamid = str(orjson.loads(raw)["messages"][0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        wamid = None
    return SendOutcome(True, False, wamid=wamid)


async def deliver(context: JobContext, reply_to_id: str) -> int:
    """Send the pending replies to one inbound message, in order; answers how many were sent."""
    settings: Settings = context.settings
    async with context.unit(write=False) as reader:
        outgoing = (
            await reader.scalars(
                select(WhatsAppMessage)
                .where(
                    WhatsAppMessage.reply_to_id == reply_to_id,
                    WhatsAppMessage.direction == "out",
                    WhatsAppMessage.status == "pending",
                )
                .order_by(WhatsAppMessage.position)
            )
        ).all()
        if not outgoing:
            return 0
        account = await reader.get(WhatsAppAccount, outgoing[0].account_id)
        if account is None:
            return 0
        secrets = service.account_secrets(settings, account)
        phone_number_id = account.phone_number_id
    token = secrets.get("access_token")
    sent = 0
    policy = outbound_policy(settings)
    async with guarded_client(policy, timeout=settings.outbound_timeout, max_redirects=0) as client:
        for message in outgoing:
            outcome = SendOutcome(
                False, False, error="The access token can no longer be read; save it again."
            )
            attempts = 0
            if token is not None:
                for attempt in range(settings.whatsapp_send_attempts):
                    attempts = attempt + 1
                    outcome = await send_text(
                        client, settings, phone_number_id, token, message.wa_id, message.text or ""
                    )
                    if outcome.ok or not outcome.transient:
                        break
                    if attempt + 1 < settings.whatsapp_send_attempts:
                        await asyncio.sleep(settings.whatsapp_retry_seconds * 2**attempt)
            if not outcome.ok:
                log.warning(
                    "whatsapp_send_failed",
                    message_id=message.id,
                    account_id=message.account_id,
                    transient=outcome.transient,
                    attempts=attempts,
                    reason=outcome.error,
                )
            async with context.unit() as session:
                row = await session.get(WhatsAppMessage, message.id)
                if row is None:
                    continue
                row.attempts = row.attempts + attempts
                row.processed_at = utcnow()
                if outcome.ok:
                    row.status, row.wamid, row.error = "sent", outcome.wamid, None
                    sent += 1
                else:
                    row.status, row.error = "failed", (outcome.error or "failed")[:500]
                redactor = await privacy.redactor_for(session, row.organization_id)
                if redactor is not None and row.text:  # sent or given up: the text is no longer needed
                    row.text = redactor.text(row.text)
    return sent
