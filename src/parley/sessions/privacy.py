"""The conversation sessions' personal data, handed to ``parley.privacy`` (which cannot import sessions).

A session row keeps the conversation's state: its transcript, tool calls and variables, and the
caller's and callee's numbers. Caller export and deletion, a call's deletion and the retention job
reach them through :class:`SessionsHolder`, registered when this module is imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.privacy.service import caller_forms, register_holder
from parley.sessions.models import ConversationSession


def _export(row: ConversationSession) -> dict[str, Any]:
    state = row.state or {}
    return {
        "id": row.id,
        "flow_id": row.flow_id,
        "flow_version": row.flow_version,
        "channel": row.channel,
        "status": row.status,
        "outcome": row.outcome,
        "caller": row.caller,
        "callee": row.callee,
        "language": row.language,
        "started_at": row.started_at.isoformat(),
        "ended_at": row.ended_at.isoformat() if row.ended_at else None,
        "transcript": state.get("transcript") or [],
        "tool_calls": state.get("tool_calls") or [],
        "variables": state.get("variables") or {},
    }


def _of_caller(organization_id: str, phone: str) -> Any:
    forms = caller_forms(phone)
    return (ConversationSession.organization_id == organization_id) & or_(
        ConversationSession.caller.in_(forms), ConversationSession.callee.in_(forms)
    )


class SessionsHolder:
    name = "sessions"

    async def export_caller(
        self, session: AsyncSession, organization_id: str, phone: str
    ) -> list[dict[str, Any]]:
        rows = await session.scalars(
            select(ConversationSession)
            .where(_of_caller(organization_id, phone))
            .order_by(ConversationSession.id)
        )
        return [_export(r) for r in rows]

    async def delete_caller(self, session: AsyncSession, organization_id: str, phone: str) -> int:
        result = await session.execute(
            delete(ConversationSession)
            .where(_of_caller(organization_id, phone))
            .returning(ConversationSession.id)
        )
        return len(result.all())

    async def delete_for_calls(
        self, session: AsyncSession, organization_id: str, session_ids: Sequence[str]
    ) -> int:
        if not session_ids:
            return 0
        result = await session.execute(
            delete(ConversationSession)
            .where(
                ConversationSession.organization_id == organization_id,
                ConversationSession.id.in_(session_ids),
            )
            .returning(ConversationSession.id)
        )
        return len(result.all())

    async def expire(self, session: AsyncSession, organization_id: str, cutoff: datetime) -> int:
        result = await session.execute(
            delete(ConversationSession)
            .where(
                ConversationSession.organization_id == organization_id,
                ConversationSession.status == "ended",
                ConversationSession.ended_at < cutoff,
            )
            .returning(ConversationSession.id)
        )
        return len(result.all())


register_holder(SessionsHolder())
