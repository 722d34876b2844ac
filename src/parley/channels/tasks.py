"""The WhatsApp jobs: answer one inbound message (the turn, then its replies), and send replies left
pending by a restart. The logic lives in :mod:`parley.channels.whatsapp`; this module binds it to the
job registry."""

from __future__ import annotations

import contextlib
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.channels.models import WhatsAppMessage
from parley.channels.whatsapp import INBOUND_JOB, SEND_JOB, answer, deliver, open_session_id
from parley.kit.db import utcnow
from parley.kit.errors import ParleyError
from parley.kit.jobs import JobContext, registry
from parley.sessions import locks

log = structlog.get_logger("parley.channels.whatsapp")


async def _mark(context: JobContext, message_id: str, status: str, error: str) -> None:
    async with context.unit() as session:
        message = await session.get(WhatsAppMessage, message_id)
        if message is not None and message.status == "received":
            message.status, message.error, message.processed_at = status, error[:500], utcnow()


async def recover_inbound(session: AsyncSession) -> list[dict[str, Any]]:
    rows = await session.scalars(
        select(WhatsAppMessage.id)
        .where(WhatsAppMessage.direction == "in", WhatsAppMessage.status == "received")
        .order_by(WhatsAppMessage.created_at)
        .limit(1000)
    )
    return [{"message_id": message_id} for message_id in rows]


@registry.handler(INBOUND_JOB, recover=recover_inbound)
async def handle_inbound(context: JobContext, payload: dict[str, Any]) -> None:
    """Run the turn for one inbound message (once: a processed message is skipped), then send replies."""
    message_id = str(payload["message_id"])
    async with context.unit(write=False) as reader:
        message = await reader.get(WhatsAppMessage, message_id)
        if message is None or message.direction != "in" or message.status != "received":
            return
        account_id, wa_id = message.account_id, message.wa_id
    # One sender's messages on one account are answered one after another, in order; the open
    # session is looked up under that lock, so two quick messages cannot start two sessions.
    async with locks.hold(f"whatsapp:{account_id}:{wa_id}"), contextlib.AsyncExitStack() as stack:
        async with context.unit(write=False) as reader:
            open_id = await open_session_id(reader, account_id, wa_id)
        if open_id is not None:
            await stack.enter_async_context(locks.hold(open_id))  # beside the idle sweeper
        try:
            answered = await answer(context, message_id, account_id, open_id)
        except ParleyError as exc:
            log.warning("whatsapp_turn_failed", message_id=message_id, reason=exc.detail)
            await _mark(context, message_id, "failed", exc.detail)
            return
        except Exception as exc:
            log.error("whatsapp_turn_failed", message_id=message_id, error_type=type(exc).__name__)
            await _mark(context, message_id, "failed", "The turn failed unexpectedly.")
            return
        if answered:
            await deliver(context, message_id)


async def recover_sends(session: AsyncSession) -> list[dict[str, Any]]:
    rows = await session.scalars(
        select(WhatsAppMessage.reply_to_id)
        .where(WhatsAppMessage.direction == "out", WhatsAppMessage.status == "pending")
        .distinct()
        .limit(1000)
    )
    return [{"reply_to_id": reply_to_id} for reply_to_id in rows if reply_to_id]


@registry.handler(SEND_JOB, recover=recover_sends)
async def handle_send(context: JobContext, payload: dict[str, Any]) -> None:
    """Send replies left pending (a restart between the turn and the send)."""
    await deliver(context, str(payload["reply_to_id"]))
