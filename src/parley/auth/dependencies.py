"""FastAPI dependencies: thin wrappers over the identity resolver (:mod:`parley.auth.identity`).

Use the ``Annotated`` aliases in handlers: ``CurrentPrincipal``, ``OrgReader`` (any member),
``OrgWriter`` (member or above), ``OrgAdmin``, ``OrgOwner`` and ``PlatformAdmin``.

Other layers that want to act once a request's principal is known (the audit log of mutating
requests) register a hook with :func:`on_authenticated` at start-up; auth imports none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.identity import QUERY_CREDENTIAL_PARAMETERS, IdentityResolver, Presented
from parley.auth.identity import require_role as check_role
from parley.auth.principal import OrgContext, Principal
from parley.auth.roles import Role
from parley.kit.db import RequestUnit
from parley.kit.errors import Forbidden, ParleyError, Unauthorized

AuthenticatedHook = Callable[[Request, AsyncSession, Principal], None]


def on_authenticated(app: FastAPI, hook: AuthenticatedHook) -> None:
    """Call ``hook(request, session, principal)`` once a request's principal is resolved."""
    hooks: list[AuthenticatedHook] = getattr(app.state, "authenticated_hooks", [])
    app.state.authenticated_hooks = [*hooks, hook]


def client_address(request: Request) -> str | None:
    return request.client.host if request.client else None


def presented(request: Request) -> Presented:
    """What an HTTP request presented."""
    query_token = None
    if request.scope.get("query_string"):  # most requests have none: skip parsing
        query = request.query_params
        query_token = next((query[name] for name in QUERY_CREDENTIAL_PARAMETERS if query.get(name)), None)
    return Presented(
        authorization=request.headers.get("authorization"),
        organization=request.headers.get("x-organization-id"),
        query_token=query_token.strip() if query_token else None,
        address=client_address(request),
    )


def resolver(request: Request) -> IdentityResolver:
    return IdentityResolver.of(request.app.state)


async def limit_by_address(request: Request) -> None:
    """For public routes a browser calls (the OAuth callback): count the request per address."""
    await resolver(request).limit_address(client_address(request))


async def guard_signed_webhook(request: Request) -> AsyncIterator[None]:
    """For webhooks signed by a provider (Twilio, WhatsApp): an address whose requests keep failing
    their signature is refused with 429 for a while. Verified deliveries are not counted per address,
    since every tenant's deliveries come from the provider's few addresses."""
    identity = resolver(request)
    address = client_address(request)
    await identity.refuse_blocked_address(address)
    try:
        yield
    except ParleyError as exc:
        if isinstance(exc, Unauthorized | Forbidden):
            await identity.count_failure(address)
        raise


async def _principal(request: Request, session: AsyncSession) -> Principal:
    """The request's principal, resolved once however many dependencies ask for it."""
    # ``request.state``'s own dict: a name not set yet costs Starlette's ``State`` an AttributeError.
    state: dict[str, Any] = request.scope.setdefault("state", {})
    principal: Principal | None = state.get("principal")
    if principal is None:
        principal = state["principal"] = await resolver(request).principal(session, presented(request))
        for hook in getattr(request.app.state, "authenticated_hooks", ()):
            hook(request, session, principal)
    return principal


async def _org_context(request: Request, session: AsyncSession) -> OrgContext:
    state: dict[str, Any] = request.scope.setdefault("state", {})
    context: OrgContext | None = state.get("org_context")
    if context is None:
        principal = await _principal(request, session)
        context = state["org_context"] = await resolver(request).context(
            session, principal, request.headers.get("x-organization-id")
        )
        state["organization_id"] = context.organization_id
    return context


class IdentityDependency(HTTPBearer):
    """One dependency per request for its identity, which is also the bearer scheme of OpenAPI.

    FastAPI documents a dependency that is a security scheme as such; being the scheme itself (instead
    of depending on ``HTTPBearer``) spares a request FastAPI's per-dependency cost twice over. The header
    is read by the identity resolver, whose 401s say precisely what is wrong.
    """

    def __init__(self, resolve: Callable[[Request], Awaitable[Principal | OrgContext]]) -> None:
        super().__init__(
            bearerFormat="JWT",
            auto_error=False,
            description="JWT or platform API key",
            scheme_name="HTTPBearer",
        )
        self.resolve = resolve

    async def __call__(self, request: Request) -> Any:  # type: ignore[override]
        return await self.resolve(request)


async def _request_principal(request: Request) -> Principal:
    return await _principal(request, RequestUnit.of(request).open_reader())


async def _request_org_context(request: Request) -> OrgContext:
    return await _org_context(request, RequestUnit.of(request).open_reader())


def _role_check(minimum: Role) -> Callable[[Request], Awaitable[OrgContext]]:
    async def check(request: Request) -> OrgContext:
        context = await _request_org_context(request)
        check_role(context, minimum)
        return context

    return check


get_principal = IdentityDependency(_request_principal)
get_org_context = IdentityDependency(_request_org_context)
CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def require_role(minimum: Role) -> object:
    return Depends(IdentityDependency(_role_check(minimum)))


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
