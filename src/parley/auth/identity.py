"""The one identity resolver: what a caller presented becomes one Principal and one OrgContext.

Every entry point uses it, whatever its transport: the HTTP dependencies, the audio WebSocket, the
Twilio media stream, the Twilio and WhatsApp webhooks, job handlers and the demo seed. It raises the
typed errors of :mod:`parley.kit.errors`; a transport only maps them to its own status or close code.

What it accepts:

- ``Authorization: Bearer <JWT or pk_ API key>`` (never in a URL: a long-lived credential in a query
  string ends up in proxy logs, browser history and Referer headers);
- ``?token=pst_...``, a short-lived stream token bound to one session and purpose;
- ``X-Organization-Id`` (or a transport's equivalent) choosing the active organization;
- :func:`system_context` for the platform acting on an organization's behalf (a verified webhook, a
  job, the seed), always naming its actor.

Rate limits are counted here too: per principal, per organization, per address for unauthenticated
requests, and per address for failed authentications (after which the address gets 429 for a while).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.cache import MISS, IdentityCache
from parley.auth.models import Membership
from parley.auth.principal import OrgContext, Principal
from parley.auth.roles import Role
from parley.auth.service import API_KEY_PREFIX, KnownUsers, principal_from_api_key, user_from_claims
from parley.auth.stream_tokens import StreamPurpose, is_stream_token, verify_stream_token
from parley.auth.tokens import TokenVerifier
from parley.config import Settings
from parley.kit.errors import BadRequest, Forbidden, NotFound, TooManyRequests, Unauthorized
from parley.kit.ratelimit import RateLimiter

# The query parameters a credential could be smuggled in; only a pst_ stream token is accepted there.
QUERY_CREDENTIAL_PARAMETERS = ("token", "access_token", "api_key")
# Said wherever the organization is ambiguous: HTTP callers set the header, CLI users have no header.
CHOOSE_ORGANIZATION = "the X-Organization-Id header (in `parley chat`: --org or PARLEY_ORG)"

# Built once: the hot path's statement, with its compiled form cached by SQLAlchemy.
_MEMBER_ROLE = select(Membership.role).where(
    Membership.organization_id == bindparam("organization_id"),
    Membership.user_id == bindparam("user_id"),
)


@dataclass(frozen=True)
class Presented:
    """What a caller presented, independent of the transport it came by."""

    authorization: str | None = None  # the Authorization header's value
    organization: str | None = None  # X-Organization-Id (or ?org= on a WebSocket)
    query_token: str | None = None  # ?token= (only pst_ stream tokens are accepted)
    address: str | None = None  # the client's address, for per-address limits


def system_context(
    organization_id: str, *, actor: str, role: Role = Role.member, name: str | None = None
) -> OrgContext:
    """The platform acting for ``organization_id``; ``actor`` names who or what it acts as.

    ``actor`` is recorded wherever the context's principal is (``created_by`` of a session, for
    example): ``"twilio"`` for the voice webhook, a WhatsApp account's id for its conversations.
    """
    if not actor:
        raise ValueError("a system context needs an explicit actor")
    return OrgContext(organization_id, role, Principal(kind="system", id=actor, name=name))


def user_context(organization_id: str, role: Role, *, user_id: str, subject: str | None = None) -> OrgContext:
    """A user acting in an organization whose membership the caller has just established itself
    (the demo seed, which made the owner and the organization in the same transaction)."""
    return OrgContext(organization_id, role, Principal(kind="user", id=user_id, subject=subject))


def require_role(context: OrgContext, minimum: Role, *, what: str | None = None) -> None:
    """:class:`Forbidden` with a sentence when the context's role is below ``minimum``."""
    if not context.role.at_least(minimum):
        raise Forbidden(
            f"{what} needs the {minimum.value} role or higher; your role is {context.role.value}."
            if what
            else f"This needs the {minimum.value} role or higher; your role is {context.role.value}."
        )


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer`` header; :class:`Unauthorized` with a reason otherwise."""
    if not authorization:
        raise Unauthorized("Authentication required: send 'Authorization: Bearer <token>'.")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        # The unknown "scheme" may be a bare credential: never echo it back.
        raise Unauthorized("Only the Bearer scheme is accepted; send 'Authorization: Bearer <token>'.")
    if not token:
        raise Unauthorized("The bearer token is empty.")
    return token


def refuse_long_lived_in_url(token: str) -> None:
    """:class:`Unauthorized` for anything but a stream token in a URL."""
    if token and not is_stream_token(token):
        # Short enough for a WebSocket close reason (123 bytes).
        raise Unauthorized(
            "API keys and login tokens are not accepted in a URL; use a pst_ token from "
            "POST /api/sessions/{id}/audio-token."
        )


class IdentityResolver:
    """Resolves presented credentials; built from the app state (``IdentityResolver.of(state)``)."""

    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier,
        known_users: KnownUsers | None,
        limiter: RateLimiter,
        cache: IdentityCache | None = None,
    ) -> None:
        self.settings = settings
        self.verifier = verifier
        self.known_users = known_users
        self.limiter = limiter
        self.cache = cache

    @classmethod
    def of(cls, state: Any) -> IdentityResolver:
        # Read on every call: tests and the lifespan may swap the limiter or the verifier on the state.
        return cls(
            state.settings,
            state.token_verifier,
            getattr(state, "known_users", None),
            state.rate_limiter,
            getattr(state, "identity_cache", None),
        )

    # --- principals ---------------------------------------------------------------------------------

    async def principal(self, session: AsyncSession, presented: Presented) -> Principal:
        """The caller behind the Authorization header (a user or an API key), rate limited."""
        if presented.query_token:
            refuse_long_lived_in_url(presented.query_token)
        await self._refuse_blocked_address(presented.address)
        try:
            token = bearer_token(presented.authorization)
            principal = await self._verify(session, token)
        except Unauthorized:
            if presented.authorization:  # a wrong credential, not a missing one
                await self._count_failure(presented.address)
            raise
        await self._limit_principal(principal)
        return principal

    async def _verify(self, session: AsyncSession, token: str) -> Principal:
        if token.startswith(API_KEY_PREFIX):
            return await principal_from_api_key(session, token, self.cache)
        if is_stream_token(token):
            raise Unauthorized(
                "A stream token opens one session's audio only; send it as ?token= on that WebSocket."
            )
        claims = await self.verifier.verify(token)
        return await user_from_claims(session, claims, self.settings.admin_subjects, self.known_users)

    async def stream(
        self, token: str, *, session_id: str, purpose: StreamPurpose, address: str | None = None
    ) -> OrgContext:
        """The member context a ``pst_`` stream token grants on its one session."""
        context, _ = await self._stream(token, session_id, purpose, address)
        return context

    async def twilio_media(self, token: str) -> tuple[OrgContext, str]:
        """A Twilio media stream's context and session, from the token our TwiML handed Twilio."""
        return await self._stream(token, None, "twilio-media", None)

    async def _stream(
        self, token: str, session_id: str | None, purpose: StreamPurpose, address: str | None
    ) -> tuple[OrgContext, str]:
        await self._refuse_blocked_address(address)
        try:
            grant = verify_stream_token(self.settings, token, session_id=session_id, purpose=purpose)
        except Unauthorized:
            await self._count_failure(address)
            raise
        principal = Principal(kind="stream", id=grant.issued_by)
        if (
            purpose == "audio"
        ):  # a Twilio media token's issuer is the platform: counting it would be cross-tenant
            await self._limit_principal(principal)
        context = OrgContext(grant.organization_id, Role.member, principal)
        await self.limit_organization(context.organization_id)
        return context, grant.session_id

    # --- organizations -------------------------------------------------------------------------------

    async def membership_role(
        self, session: AsyncSession, principal: Principal, organization_id: str
    ) -> Role | None:
        """The principal's role in ``organization_id``; None when it has none."""
        if principal.kind == "api_key":
            return principal.api_key_role() if principal.api_key_organization_id == organization_id else None
        if principal.kind != "user":
            return None

        def read() -> Awaitable[str | None]:
            return session.scalar(_MEMBER_ROLE, {"organization_id": organization_id, "user_id": principal.id})

        cache = self.cache
        if cache is None:
            role = await read()
        else:
            cached = cache.role(principal.id, organization_id)
            if cached is not MISS:
                return Role(cached) if cached is not None else None
            role = await cache.read_role(principal.id, organization_id, read)
        return Role(role) if role is not None else None

    async def context(
        self,
        session: AsyncSession,
        principal: Principal,
        requested: str | None,
        *,
        pick_only_membership: bool = True,
        how_to_choose: str = CHOOSE_ORGANIZATION,
    ) -> OrgContext:
        """The active organization: the API key's own, the requested one, or a user's only one.

        Another organization's id answers the same 404 as a missing one, so ids cannot be probed.
        """
        requested = (requested or "").strip() or None
        if principal.kind == "api_key":
            organization_id = principal.api_key_organization_id
            assert organization_id is not None
            if requested is not None and requested != organization_id:
                raise NotFound(f"Organization {requested!r} was not found.")
            context = OrgContext(organization_id, principal.api_key_role(), principal)
        elif requested is not None:
            context = await self.organization(session, principal, requested)
        elif not pick_only_membership:
            raise NotFound(f"Choose the organization with {how_to_choose}.")
        else:
            context = await self._only_membership(session, principal, how_to_choose)
        await self.limit_organization(context.organization_id)
        return context

    async def organization(
        self, session: AsyncSession, principal: Principal, organization_id: str
    ) -> OrgContext:
        """The principal's context in a named organization; 404 when it is not a member."""
        role = await self.membership_role(session, principal, organization_id)
        if role is None:
            raise NotFound(f"Organization {organization_id!r} was not found.")
        return OrgContext(organization_id, role, principal)

    async def _only_membership(self, session: AsyncSession, principal: Principal, how: str) -> OrgContext:
        rows: Sequence[Any] = (
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
            raise BadRequest(f"You belong to {count} organizations; choose one with {how}.")
        return OrgContext(rows[0][0], Role(rows[0][1]), principal)

    # --- limits --------------------------------------------------------------------------------------

    async def _limit_principal(self, principal: Principal) -> None:
        decision = await self.limiter.check(f"{principal.kind}:{principal.id}")
        if not decision.allowed:
            raise TooManyRequests(
                f"Rate limit of {self.limiter.limit} requests per minute exceeded; "
                f"retry in {decision.retry_after} s.",
                decision.retry_after,
            )

    async def limit_organization(self, organization_id: str) -> None:
        """Count one request of ``organization_id`` (all its users, keys and webhooks together)."""
        limit = self.settings.rate_limit_org_per_minute
        decision = await self.limiter.check(f"org:{organization_id}", limit=limit)
        if not decision.allowed:
            raise TooManyRequests(
                f"This organization's rate limit of {limit} requests per minute is exceeded; "
                f"retry in {decision.retry_after} s.",
                decision.retry_after,
            )

    async def limit_address(self, address: str | None) -> None:
        """Count one unauthenticated request (a webhook, an OAuth callback) from ``address``."""
        if not address:
            return
        limit = self.settings.rate_limit_address_per_minute
        decision = await self.limiter.check(f"addr:{address}", limit=limit)
        if not decision.allowed:
            raise TooManyRequests(
                f"Too many requests from your address (limit {limit} per minute); "
                f"retry in {decision.retry_after} s.",
                decision.retry_after,
            )

    async def refuse_blocked_address(self, address: str | None) -> None:
        """429 when ``address`` has failed authentication too often (a signature, a key, a token)."""
        await self._refuse_blocked_address(address)

    async def count_failure(self, address: str | None) -> None:
        """Count a failed authentication (a bad webhook signature, say) against ``address``."""
        await self._count_failure(address)

    async def _refuse_blocked_address(self, address: str | None) -> None:
        if not address:
            return
        limit = self.settings.auth_failures_per_minute
        decision = await self.limiter.check(f"authfail:{address}", limit=limit, peek=True)
        if not decision.allowed:
            raise TooManyRequests(
                f"Too many failed authentication attempts from your address (limit {limit} per minute); "
                f"retry in {decision.retry_after} s.",
                decision.retry_after,
            )

    async def _count_failure(self, address: str | None) -> None:
        if address:
            await self.limiter.check(f"authfail:{address}", limit=self.settings.auth_failures_per_minute)
