from __future__ import annotations

from parley.auth import service
from parley.auth.dependencies import CurrentPrincipal
from parley.auth.schemas import MembershipOut, MeOut
from parley.kit.db import DbSession
from parley.kit.routing import ParleyRouter

router = ParleyRouter(prefix="/api", tags=["Organizations"])


@router.get("/me", summary="Get Me", response_model=MeOut)
async def get_me(session: DbSession, principal: CurrentPrincipal) -> MeOut:
    """Who the credentials belong to, and the organizations (with roles) they can act in."""
    memberships = [
        MembershipOut(organization_id=i, organization_name=n, role=role)
        for i, n, role in await service.memberships_of(session, principal)
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
