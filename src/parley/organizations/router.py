from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from parley.api_keys import service as api_keys
from parley.audit.dependencies import describe, set_organization
from parley.auth.dependencies import CurrentPrincipal, CurrentUser, resolver
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import Forbidden, documented
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut
from parley.organizations import service
from parley.organizations.schemas import (
    MemberAdd,
    MemberOut,
    MemberUpdate,
    OrganizationCreate,
    OrganizationOut,
    OrganizationUpdate,
)

router = ParleyRouter(prefix="/api/organizations", tags=["Organizations"])

OrgId = Annotated[str, Path(alias="orgId", max_length=40, description="Organization id (org_...).")]
UserId = Annotated[str, Path(alias="userId", max_length=40)]


async def _path_org(
    request: Request, session: DbSession, principal: CurrentPrincipal, org_id: OrgId
) -> OrgContext:
    identity = resolver(request)
    context = await identity.organization(session, principal, org_id)
    await identity.limit_organization(org_id)
    set_organization(request, org_id)
    return context


PathOrg = Annotated[OrgContext, Depends(_path_org)]


def _need(context: OrgContext, minimum: Role) -> None:
    if not context.role.at_least(minimum):
        raise Forbidden(f"This needs the {minimum.value} role or higher; your role is {context.role.value}.")


def _revoked(key_ids: list[str]) -> dict[str, list[str]]:
    return {"revoked_api_keys": key_ids} if key_ids else {}


def _out(org: object, role: Role | str | None) -> OrganizationOut:
    out = OrganizationOut.model_validate(org)
    out.role = Role(role) if role is not None else None
    return out


@router.post("", summary="Create Organizations", responses=documented(409), response_model=OrganizationOut)
async def create_organization(
    request: Request,
    session: DbSession,
    user: CurrentUser,
    data: Annotated[OrganizationCreate, ParsedBody(OrganizationCreate)],
) -> OrganizationOut:
    """Create an organization; the caller becomes its owner."""
    org = await service.create_organization(session, user, data)
    set_organization(request, org.id)
    describe(request, "organization", org.id)
    return _out(org, Role.owner)


@router.get("", summary="List Organizations", response_model=list[OrganizationOut])
async def list_organizations(session: DbSession, principal: CurrentPrincipal) -> list[OrganizationOut]:
    """The organizations the caller belongs to, with the caller's role in each."""
    if principal.kind == "api_key":
        assert principal.api_key_organization_id is not None
        org = await service.get_organization(session, principal.api_key_organization_id)
        return [_out(org, principal.api_key_role())]
    return [_out(org, role) for org, role in await service.list_user_organizations(session, principal.id)]


@router.get("/{orgId}", summary="Get Organization", response_model=OrganizationOut)
async def get_organization(session: DbSession, context: PathOrg) -> OrganizationOut:
    org = await service.get_organization(session, context.organization_id)
    return _out(org, context.role)


@router.patch(
    "/{orgId}", summary="Update Organization", responses=documented(409), response_model=OrganizationOut
)
async def update_organization(
    session: DbSession,
    context: PathOrg,
    data: Annotated[OrganizationUpdate, ParsedBody(OrganizationUpdate)],
) -> OrganizationOut:
    """Rename or reconfigure an organization (owners and admins)."""
    _need(context, Role.admin)
    org = await service.get_organization(session, context.organization_id)
    return _out(await service.update_organization(session, org, data), context.role)


@router.delete("/{orgId}", summary="Delete Organization", response_model=DeletedOut)
async def delete_organization(request: Request, session: DbSession, context: PathOrg) -> DeletedOut:
    """Delete an organization and everything it owns, stored files included (owners only).

    Its audit events are kept.
    """
    _need(context, Role.owner)
    org = await service.get_organization(session, context.organization_id)
    await service.delete_organization(session, org, request.app.state.blobs)
    return DeletedOut(id=org.id)


@router.get("/{orgId}/members", summary="List Organization Members", response_model=list[MemberOut])
async def list_members(session: DbSession, context: PathOrg) -> list[MemberOut]:
    return await service.list_members(session, context.organization_id)


@router.post(
    "/{orgId}/members", summary="Add Organization Member", responses=documented(409), response_model=MemberOut
)
async def add_member(
    request: Request,
    session: DbSession,
    context: PathOrg,
    data: Annotated[MemberAdd, ParsedBody(MemberAdd)],
) -> MemberOut:
    """Add a person by their identity-provider subject (owners and admins; only owners grant owner)."""
    _need(context, Role.admin)
    member = await service.add_member(session, context.organization_id, context.role, data)
    describe(request, "membership", member.user_id, role=member.role.value)
    return member


@router.patch(
    "/{orgId}/members/{userId}",
    summary="Change Member Role",
    responses=documented(409),
    response_model=MemberOut,
)
async def change_member_role(
    request: Request,
    session: DbSession,
    context: PathOrg,
    user_id: UserId,
    data: Annotated[MemberUpdate, ParsedBody(MemberUpdate)],
) -> MemberOut:
    _need(context, Role.admin)
    await service.change_member_role(session, context.organization_id, context.role, user_id, data.role)
    revoked = await api_keys.revoke_keys_beyond(session, context.organization_id, user_id, data.role)
    # The audit event names the keys that stopped working with the demotion (only when there are some).
    describe(request, "membership", user_id, role=data.role.value, **_revoked(revoked))
    members = await service.list_members(session, context.organization_id)
    return next(m for m in members if m.user_id == user_id)


@router.delete(
    "/{orgId}/members/{userId}", summary="Remove Member", responses=documented(409), response_model=DeletedOut
)
async def remove_member(
    request: Request, session: DbSession, context: PathOrg, user_id: UserId
) -> DeletedOut:
    _need(context, Role.admin)
    await service.remove_member(session, context.organization_id, context.role, user_id)
    revoked = await api_keys.revoke_keys_beyond(session, context.organization_id, user_id, None)
    describe(request, "membership", user_id, **_revoked(revoked))
    return DeletedOut(id=user_id)
