from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.admin import service
from parley.admin.schemas import AdminOrganizationOut
from parley.audit.dependencies import describe
from parley.auth.dependencies import PlatformAdmin
from parley.auth.models import Organization
from parley.kit.db import DbSession
from parley.kit.errors import documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.organizations import service as organizations
from parley.organizations.schemas import MemberOut
from parley.telephony import sync
from parley.telephony.schemas import SyncReport

router = ParleyRouter(prefix="/api/admin", tags=["Admin"])
# Included after telephony's own routes (parley.app) so the API document keeps its order.
telephony_router = ParleyRouter(prefix="/api/admin", tags=["Admin"])

OrgId = Annotated[str, Path(alias="orgId", max_length=40)]


@router.get("/organizations", summary="List Admin Organizations", response_model=Page[AdminOrganizationOut])
async def list_all_organizations(
    session: DbSession,
    _admin: PlatformAdmin,
    page: Pagination,
    q: Annotated[str | None, Query(max_length=200, description="Filter by name or slug.")] = None,
) -> Page[AdminOrganizationOut]:
    """Every organization on the platform (platform admins only)."""
    orgs, cursor = await paginate(session, service.organizations_query(q), Organization.id, page)
    counts = await service.member_counts(session, orgs)
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


@telephony_router.post(
    "/organizations/{orgId}/telephony/sync",
    summary="Sync Admin",
    responses=documented(409),
    response_model=SyncReport,
)
async def sync_admin(
    request: Request, session: DbSession, _admin: PlatformAdmin, org_id: OrgId
) -> SyncReport:
    """Reconcile the organization's trunks, numbers and dispatch rules with its providers (platform admins).

    Creates what is missing at the provider, updates what drifted, and reports — never deletes — what
    exists only there. Idempotent: a second run reports everything unchanged. Provider failures are
    listed under ``errors``. 409 while another sync of the same organization runs (in any process).
    """
    await organizations.get_organization(session, org_id)
    report = await sync.sync_organization(session, request.app.state.settings, org_id)
    describe(
        request,
        "telephony_sync",
        org_id,
        created=len(report.created),
        updated=len(report.updated),
        orphaned=len(report.orphaned),
        errors=len(report.errors),
    )
    return report
