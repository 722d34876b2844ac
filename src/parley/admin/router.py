from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from sqlalchemy import func, select

from parley.admin.schemas import AdminOrganizationOut
from parley.auth.dependencies import PlatformAdmin
from parley.auth.models import Membership, Organization
from parley.kit.db import DbSession
from parley.kit.pagination import Page, Pagination, paginate
from parley.organizations import service as organizations
from parley.organizations.schemas import MemberOut

router = APIRouter(prefix="/api/admin", tags=["Admin"])

OrgId = Annotated[str, Path(alias="orgId", max_length=40)]


@router.get("/organizations", summary="List Admin Organizations", response_model=Page[AdminOrganizationOut])
async def list_all_organizations(
    session: DbSession,
    _admin: PlatformAdmin,
    page: Pagination,
    q: Annotated[str | None, Query(max_length=200, description="Filter by name or slug.")] = None,
) -> Page[AdminOrganizationOut]:
    """Every organization on the platform (platform admins only)."""
    stmt = select(Organization)
    if q:
        pattern = f"%{q.lower()}%"
        stmt = stmt.where(func.lower(Organization.name).like(pattern) | Organization.slug.like(pattern))
    orgs, cursor = await paginate(session, stmt, Organization.id, page)
    counts = dict(
        (
            await session.execute(
                select(Membership.organization_id, func.count())
                .where(Membership.organization_id.in_([o.id for o in orgs]))
                .group_by(Membership.organization_id)
            )
        ).all()
    )
    items = [
        AdminOrganizationOut(
            id=o.id, name=o.name, slug=o.slug, member_count=int(counts.get(o.id, 0)), created_at=o.created_at
        )
        for o in orgs
    ]
    return Page[AdminOrganizationOut](items=items, next_cursor=cursor)


@router.get(
    "/organizations/{orgId}/users", summary="List Admin Organizations Users", response_model=list[MemberOut]
)
async def list_organization_users(
    session: DbSession, _admin: PlatformAdmin, org_id: OrgId
) -> list[MemberOut]:
    """The members of any organization with their roles (platform admins only)."""
    await organizations.get_organization(session, org_id)
    return await organizations.list_members(session, org_id)
