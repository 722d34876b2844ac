from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy import select

from parley.auth.dependencies import CurrentPrincipal
from parley.auth.models import Membership, Organization
from parley.auth.roles import Role
from parley.kit.db import DbSession

router = APIRouter(prefix="/api", tags=["Organizations"])


class MembershipOut(BaseModel):
    organization_id: str
    organization_name: str
    role: Role


class MeOut(BaseModel):
    kind: str
    id: str
    subject: str | None
    email: str | None
    name: str | None
    is_platform_admin: bool
    scopes: list[str]
    memberships: list[MembershipOut]


@router.get("/me", summary="Get Me", response_model=MeOut)
async def get_me(session: DbSession, principal: CurrentPrincipal) -> MeOut:
    """Who the credentials belong to, and the organizations (with roles) they can act in."""
    if principal.kind == "api_key":
        org = await session.get(Organization, principal.api_key_organization_id)
        memberships = (
            [MembershipOut(organization_id=org.id, organization_name=org.name, role=principal.api_key_role())]
            if org
            else []
        )
    else:
        rows = await session.execute(
            select(Organization.id, Organization.name, Membership.role)
            .join(Membership, Membership.organization_id == Organization.id)
            .where(Membership.user_id == principal.id)
            .order_by(Organization.id)
        )
        memberships = [
            MembershipOut(organization_id=i, organization_name=n, role=Role(r)) for i, n, r in rows
        ]
    return MeOut(
        kind=principal.kind,
        id=principal.id,
        subject=principal.subject,
        email=principal.email,
        name=principal.name,
        is_platform_admin=principal.is_platform_admin,
        scopes=sorted(principal.scopes),
        memberships=memberships,
    )
