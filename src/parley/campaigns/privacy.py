"""Campaign contacts as personal data, handed to ``parley.privacy`` (which cannot import campaigns).

A contact row holds a phone number and the variables uploaded with it. A caller's export lists them;
a caller's deletion removes them (their do-not-call entry stays: it is kept *because* they asked not to
be called); retention removes the contacts of campaigns that finished before the cutoff. Deleting one
call only unlinks the contact from it: the contact belongs to the campaign's list, not to the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.campaigns.models import Campaign, CampaignContact, DoNotCall
from parley.privacy.service import caller_forms, register_holder

FINISHED = ("completed", "cancelled")


def _export(row: CampaignContact) -> dict[str, Any]:
    return {
        "id": row.id,
        "campaign_id": row.campaign_id,
        "phone": row.phone,
        "variables": row.variables,
        "status": row.status,
        "attempts": row.attempts,
        "last_result": row.last_result,
        "answered_by": row.answered_by,
        "call_id": row.call_id,
        "last_attempt_at": row.last_attempt_at.isoformat() if row.last_attempt_at else None,
        "created_at": row.created_at.isoformat(),
    }


class CampaignContactsHolder:
    name = "campaign_contacts"

    async def export_caller(
        self, session: AsyncSession, organization_id: str, phone: str
    ) -> list[dict[str, Any]]:
        forms = caller_forms(phone)
        rows = await session.scalars(
            select(CampaignContact)
            .where(CampaignContact.organization_id == organization_id, CampaignContact.phone.in_(forms))
            .order_by(CampaignContact.id)
        )
        out = [_export(r) for r in rows]
        blocked = await session.scalar(
            select(DoNotCall.id).where(
                DoNotCall.organization_id == organization_id, DoNotCall.phone.in_(forms)
            )
        )
        if blocked is not None:
            out.append({"do_not_call": True, "id": blocked, "phone": phone})
        return out

    async def delete_caller(self, session: AsyncSession, organization_id: str, phone: str) -> int:
        result = await session.execute(
            delete(CampaignContact)
            .where(
                CampaignContact.organization_id == organization_id,
                CampaignContact.phone.in_(caller_forms(phone)),
            )
            .returning(CampaignContact.id)
        )
        return len(result.all())

    async def delete_for_calls(
        self, session: AsyncSession, organization_id: str, session_ids: Sequence[str]
    ) -> int:
        if session_ids:
            await session.execute(
                update(CampaignContact)
                .where(
                    CampaignContact.organization_id == organization_id,
                    CampaignContact.call_id.in_(session_ids),
                )
                .values(call_id=None)
                .execution_options(synchronize_session=False)
            )
        return 0

    async def expire(self, session: AsyncSession, organization_id: str, cutoff: datetime) -> int:
        finished = select(Campaign.id).where(
            Campaign.organization_id == organization_id,
            Campaign.status.in_(FINISHED),
            Campaign.updated_at < cutoff,
        )
        result = await session.execute(
            delete(CampaignContact)
            .where(
                CampaignContact.organization_id == organization_id,
                CampaignContact.campaign_id.in_(finished),
            )
            .returning(CampaignContact.id)
        )
        return len(result.all())


register_holder(CampaignContactsHolder())
