"""Platform administration: every organization, with its member count."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import Membership, Organization


def organizations_query(q: str | None = None) -> Select[Organization]:
    """Every organization on the platform, or those whose name or slug contains ``q``."""
    stmt = select(Organization)
    if q:
        pattern = f"%{q.lower()}%"
        stmt = stmt.where(func.lower(Organization.name).like(pattern) | Organization.slug.like(pattern))
    return stmt


async def member_counts(session: AsyncSession, organizations: Sequence[Organization]) -> dict[str, int]:
    rows = await session.execute(
        select(Membership.organization_id, func.count())
        .where(Membership.organization_id.in_([o.id for o in organizations]))
        .group_by(Membership.organization_id)
    )
    return {organization_id: int(count) for organization_id, count in rows.all()}
