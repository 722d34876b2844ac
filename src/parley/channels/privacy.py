"""WhatsApp messages as personal data, handed to ``parley.privacy`` (which cannot import channels).

A message's ``wa_id`` is the sender's number without its ``+`` and its ``text`` is what was written,
so a caller's export and deletion include them, a call's deletion removes the messages of its
session, and retention removes messages older than the organization's retention once they are done
with (received or pending ones are still being worked).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.channels.models import WhatsAppMessage
from parley.privacy.service import caller_forms, register_holder

_DONE = ("processed", "ignored", "failed", "sent")


def _export(row: WhatsAppMessage) -> dict[str, Any]:
    return {
        "id": row.id,
        "account_id": row.account_id,
        "direction": row.direction,
        "wa_id": row.wa_id,
        "type": row.type,
        "text": row.text,
        "status": row.status,
        "session_id": row.session_id,
        "created_at": row.created_at.isoformat(),
    }


class WhatsAppHolder:
    name = "whatsapp_messages"

    async def export_caller(
        self, session: AsyncSession, organization_id: str, phone: str
    ) -> list[dict[str, Any]]:
        rows = await session.scalars(
            select(WhatsAppMessage)
            .where(
                WhatsAppMessage.organization_id == organization_id,
                WhatsAppMessage.wa_id.in_(caller_forms(phone)),
            )
            .order_by(WhatsAppMessage.created_at, WhatsAppMessage.id)
        )
        return [_export(r) for r in rows]

    async def delete_caller(self, session: AsyncSession, organization_id: str, phone: str) -> int:
        result = await session.execute(
            delete(WhatsAppMessage)
            .where(
                WhatsAppMessage.organization_id == organization_id,
                WhatsAppMessage.wa_id.in_(caller_forms(phone)),
            )
            .returning(WhatsAppMessage.id)
        )
        return len(result.all())

    async def delete_for_calls(
        self, session: AsyncSession, organization_id: str, session_ids: Sequence[str]
    ) -> int:
        if not session_ids:
            return 0
        result = await session.execute(
            delete(WhatsAppMessage)
            .where(
                WhatsAppMessage.organization_id == organization_id,
                WhatsAppMessage.session_id.in_(session_ids),
            )
            .returning(WhatsAppMessage.id)
        )
        return len(result.all())

    async def expire(self, session: AsyncSession, organization_id: str, cutoff: datetime) -> int:
        result = await session.execute(
            delete(WhatsAppMessage)
            .where(
                WhatsAppMessage.organization_id == organization_id,
                WhatsAppMessage.created_at < cutoff,
                WhatsAppMessage.status.in_(_DONE),
            )
            .returning(WhatsAppMessage.id)
        )
        return len(result.all())


register_holder(WhatsAppHolder())
