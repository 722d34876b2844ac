"""FastAPI dependencies: the calling principal, the active organization and role requirements.

Use the ``Annotated`` aliases in handlers: ``CurrentPrincipal``, ``OrgReader`` (any member),
``OrgWriter`` (member or above), ``OrgAdmin``, ``OrgOwner`` and ``PlatformAdmin``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import func, select

from parley.audit.dependencies import audit_mutations, set_organization
from parley.auth.models import Membership
from parley.auth.principal import OrgContext, Principal
from parley.auth.roles import Role
from parley.auth.service import API_KEY_PREFIX, principal_from_api_key, user_from_claims
from parley.auth.tokens import TokenVerifier
from parley.kit.db import ReadSession
from parley.kit.errors import BadRequest, Forbidden, NotFound, TooManyRequests, Unauthorized
from parley.kit.ratelimit import RateLimiter

# Declares the bearer scheme in OpenAPI; the header itself is read below for precise error messages.
bearer_scheme = HTTPBearer(bearerFormat="JWT", auto_error=False, description="JWT or platform API key")


async def get_principal(
    request: Request,
    session: ReadSession,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    header = request.headers.get("authorization")
    if not header:
        raise Unauthorized("Authentication required: send 'Authorization: Bearer <token>'.")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        # The unknown "scheme" may be a bare credential: never echo it back.
        raise Unauthorized("Only the Bearer scheme is accepted; send 'Authorization: Bearer <token>'.")
    if not token:
        raise Unauthorized("The bearer token is empty.")
    app_state = request.app.state
    if token.startswith(API_KEY_PREFIX):
        principal = await principal_from_api_key(session, token)
    else:
        verifier: TokenVerifier = app_state.token_verifier
        claims = await verifier.verify(token)
        principal = await user_from_claims(
            session, claims, app_state.settings.admin_subjects, app_state.known_users
        )
    limiter: RateLimiter = app_state.rate_limiter
    decision = await limiter.check(f"{principal.kind}:{principal.id}")
    if not decision.allowed:
        raise TooManyRequests(
            f"Rate limit of {limiter.limit} requests per minute exceeded; retry in {decision.retry_after} s.",
            decision.retry_after,
        )
    request.state.principal = principal
    audit_mutations(request, session, principal)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


async def resolve_membership_role(
    session: ReadSession, principal: Principal, organization_id: str
) -> Role | None:
    if principal.kind == "api_key":
        return principal.api_key_role() if principal.api_key_organization_id == organization_id else None
    role = await session.scalar(
        select(Membership.role).where(
            Membership.organization_id == organization_id, Membership.user_id == principal.id
        )
    )
    return Role(role) if role is not None else None


async def get_org_context(request: Request, session: ReadSession, principal: CurrentPrincipal) -> OrgContext:
    requested = request.headers.get("x-organization-id", "").strip() or None
    if principal.kind == "api_key":
        organization_id = principal.api_key_organization_id
        assert organization_id is not None
        if requested is not None and requested != organization_id:
            raise NotFound(f"Organization {requested!r} was not found.")
        context = OrgContext(organization_id, principal.api_key_role(), principal)
    elif requested is not None:
        role = await resolve_membership_role(session, principal, requested)
        if role is None:
            raise NotFound(f"Organization {requested!r} was not found.")
        context = OrgContext(requested, role, principal)
    else:
        rows = (
            await session.execute(
                select(Membership.organization_id, Membership.role)
                .where(Membership.user_id == principal.id)
                .limit(2)
            )
        ).all()
        if not rows:
            raise BadRequest(
                "You are not a member of any organization yet; create one with POST /api/organizations."
            )
        if len(rows) > 1:
            count = await session.scalar(
                select(func.count()).select_from(Membership).where(Membership.user_id == principal.id)
            )
            raise BadRequest(
                f"You belong to {count} organizations; choose one with the X-Organization-Id header."
            )
        context = OrgContext(rows[0][0], Role(rows[0][1]), principal)
    set_organization(request, context.organization_id)
    return context


def require_role(minimum: Role) -> object:
    async def check(context: Annotated[OrgContext, Depends(get_org_context)]) -> OrgContext:
        if not context.role.at_least(minimum):
            raise Forbidden(
                f"This needs the {minimum.value} role or higher; your role is {context.role.value}."
            )
        return context

    return Depends(check)


OrgReader = Annotated[OrgContext, Depends(get_org_context)]
OrgWriter = Annotated[OrgContext, require_role(Role.member)]
OrgAdmin = Annotated[OrgContext, require_role(Role.admin)]
OrgOwner = Annotated[OrgContext, require_role(Role.owner)]


async def get_platform_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.is_platform_admin:
        raise Forbidden("Only platform administrators may use /api/admin.")
    return principal


PlatformAdmin = Annotated[Principal, Depends(get_platform_admin)]


async def get_user_principal(principal: CurrentPrincipal) -> Principal:
    if not principal.is_user:
        raise Forbidden("This operation needs a user's token, not an API key.")
    return principal


CurrentUser = Annotated[Principal, Depends(get_user_principal)]
