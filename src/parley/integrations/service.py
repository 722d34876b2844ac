"""Integrations: OAuth2 clients per organization, the connect/callback flow, tokens and their refresh.

Rules that matter:
- the ``state`` is the only credential of the (public) callback: 256 random bits, stored as its
  SHA-256, bound to the user, organization and provider that asked, valid for
  ``PARLEY_INTEGRATIONS_STATE_TTL_SECONDS`` and consumed atomically (one ``UPDATE ... WHERE
  consumed_at IS NULL``), whatever the outcome of the callback;
- PKCE S256 on every authorization; the verifier is sealed to its state row;
- client secrets and tokens are sealed to their row with :func:`~parley.kit.crypto.row_secrets` and only masked on read;
- a refresh never holds a transaction across the provider call: it claims a lease on the connection
  with a short optimistic write (``version`` and ``refresh_lease_until``), calls the provider with
  nothing open, and stores the tokens in a short write guarded by the claimed version; with the
  in-process lock, two concurrent refreshes never both spend a (rotating) refresh token.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
import structlog
from sqlalchemy import CursorResult, Select, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit import service as audit
from parley.audit.service import RequestFacts
from parley.auth.models import Membership
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.config import Settings
from parley.integrations import oauth
from parley.integrations.catalog import GENERIC, PRESETS, ProviderPreset, is_valid_key
from parley.integrations.models import IntegrationClient, IntegrationConnection, OAuthState
from parley.integrations.schemas import (
    CallbackOut,
    ClientBody,
    ClientOut,
    ConnectBody,
    ConnectionOut,
    ConnectOut,
    ProviderOut,
)
from parley.kit.crypto import constant_time_equals, mask, row_secrets, sha256_hex
from parley.kit.db import Database, unit_of_work, utcnow
from parley.kit.errors import BadRequest, Conflict, Forbidden, NotFound, ParleyError
from parley.kit.ids import new_id
from parley.kit.outbound import outbound_policy
from parley.kit.tenancy import get_owned, scoped

log = structlog.get_logger("parley.integrations")

CALLBACK_PATH = "/api/integrations/oauth/callback"
MASK_PREFIX = "••••"
# Token endpoint errors after which the refresh token is useless: the organization must connect again.
FATAL_REFRESH_ERRORS = frozenset({"invalid_grant", "invalid_client", "unauthorized_client"})


# --- helpers -------------------------------------------------------------------------------------


def callback_url(settings: Settings) -> str:
    return settings.base_url.rstrip("/") + CALLBACK_PATH


BROWSER_COOKIE_PREFIX = "parley_oauth_"


def browser_cookie_name(state_id: str) -> str:
    """One cookie per pending state, so two connects started in one browser do not overwrite each other."""
    return BROWSER_COOKIE_PREFIX + state_id


@dataclass(frozen=True)
class BrowserCookie:
    """The cookie a connect sets in the browser that started it (the callback must bring it back)."""

    name: str
    value: str
    max_age: int
    path: str
    secure: bool


def _browser_cookie(settings: Settings, state_id: str, value: str) -> BrowserCookie:
    return BrowserCookie(
        name=browser_cookie_name(state_id),
        value=value,
        max_age=int(settings.integrations_state_ttl_seconds),
        path=urlsplit(callback_url(settings)).path or "/",
        secure=settings.base_url.startswith("https://"),
    )


# Path words of this API and the catalog's template cannot name a provider.
RESERVED_KEYS = frozenset({GENERIC, "oauth", "connections", "providers"})


def _check_key(provider: str) -> None:
    if not is_valid_key(provider) or provider in RESERVED_KEYS:
        raise NotFound(
            f"There is no integration provider {provider!r}: use google, microsoft, or a key of your own "
            "(2-40 lower-case letters, digits, '-' or '_'; not generic, oauth, connections or providers) for a custom OAuth2 provider."
        )


def _origin(url: httpx.URL) -> str:
    default = {"http": 80, "https": 443}.get(url.scheme)
    port = f":{url.port}" if url.port is not None and url.port != default else ""
    return f"{url.scheme}://{url.host}{port}".lower()


def check_return_to(settings: Settings, value: str) -> str:
    """A path on this server, or an absolute URL on public_url's origin or an allow-listed origin."""
    if any(not ch.isprintable() for ch in value) or "\\" in value:
        raise BadRequest("return_to contains characters that are not allowed in a URL.")
    if value.startswith("/") and not value.startswith("//"):
        return value
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise BadRequest("return_to is not a valid URL.") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise BadRequest("return_to must be a path such as /settings or an http(s) URL.")
    allowed = {_origin(httpx.URL(settings.base_url))}
    for entry in settings.integrations_return_to_allowlist:
        try:
            allowed.add(_origin(httpx.URL(entry)))
        except httpx.InvalidURL:
            continue
    if _origin(url) not in allowed:
        raise BadRequest(
            f"return_to may only point to this server or an allowed origin; {_origin(url)} is not one "
            "(see PARLEY_INTEGRATIONS_RETURN_TO_ALLOWLIST)."
        )
    return value


def _check_endpoint(settings: Settings, name: str, value: str) -> None:
    """Custom endpoints must be https, except on hosts the operator allow-listed (local test servers)."""
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise BadRequest(f"{name} is not a valid URL.") from exc
    if not url.host:
        raise BadRequest(f"{name} has no host.")
    if url.scheme == "https":
        return
    policy = outbound_policy(settings)
    host = url.host.lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        allowed = host in policy.allowed_hosts
    else:
        allowed = host in policy.allowed_hosts or any(address in n for n in policy.allowed_networks)
    if not allowed:
        raise BadRequest(f"{name} must be an https URL: the client secret and tokens travel over it.")


# --- catalog and clients -------------------------------------------------------------------------


def _preset_out(preset: ProviderPreset, configured: bool, connected: bool) -> ProviderOut:
    authorize_url, token_url, revocation_url = preset.endpoints()
    return ProviderOut(
        key=preset.key,
        name=preset.name,
        kind="preset",
        description=preset.description,
        authorize_url=authorize_url,
        token_url=token_url,
        revocation_url=revocation_url,
        default_scopes=list(preset.default_scopes),
        token_auth_method=preset.token_auth_method,
        docs_url=preset.docs_url,
        configured=configured,
        connected=connected,
        required_fields=["client_id", "client_secret"],
    )


async def list_providers(session: AsyncSession, context: OrgContext) -> list[ProviderOut]:
    clients = {
        c.provider: c for c in (await session.scalars(scoped(IntegrationClient, context.organization_id)))
    }
    connected = set(
        (
            await session.scalars(
                scoped(IntegrationConnection, context.organization_id).with_only_columns(
                    IntegrationConnection.provider
                )
            )
        ).all()
    )
    items = [_preset_out(p, p.key in clients, p.key in connected) for p in PRESETS.values()]
    items.append(
        ProviderOut(
            key=GENERIC,
            name="Custom OAuth2 provider",
            kind="generic",
            description="Any OAuth 2.0 provider with the authorization code flow: configure it under a key "
            "of your own with PUT /api/integrations/{key}/client.",
            authorize_url=None,
            token_url=None,
            revocation_url=None,
            default_scopes=[],
            token_auth_method="client_secret_basic",  # noqa: S106
            configured=False,
            connected=False,
            required_fields=["client_id", "client_secret", "authorize_url", "token_url", "scopes"],
        )
    )
    for key in sorted(set(clients) - set(PRESETS)):
        client = clients[key]
        items.append(
            ProviderOut(
                key=key,
                name=client.name or key,
                kind="custom",
                description="A custom OAuth2 provider configured by this organization.",
                authorize_url=client.authorize_url,
                token_url=client.token_url,
                revocation_url=client.revocation_url,
                default_scopes=list(client.scopes),
                token_auth_method=cast(Any, client.token_auth_method),
                configured=True,
                connected=key in connected,
                required_fields=["client_id", "client_secret", "authorize_url", "token_url", "scopes"],
            )
        )
    return items


async def find_client(session: AsyncSession, organization_id: str, provider: str) -> IntegrationClient | None:
    return await session.scalar(
        scoped(IntegrationClient, organization_id).where(IntegrationClient.provider == provider)
    )


async def get_client(session: AsyncSession, organization_id: str, provider: str) -> IntegrationClient:
    _check_key(provider)
    row = await find_client(session, organization_id, provider)
    if row is None:
        raise NotFound(
            f"No OAuth2 client is configured for {provider!r} in this organization; "
            f"set one with PUT /api/integrations/{provider}/client."
        )
    return row


def client_config(settings: Settings, row: IntegrationClient) -> oauth.ClientConfig:
    preset = PRESETS.get(row.provider)
    secret = row_secrets(settings, row).open_or_none("client_secret", row.client_secret)
    if preset is not None:
        authorize_url, token_url, revocation_url = preset.endpoints(row.tenant)
        params = dict(preset.authorize_params)
        method = row.token_auth_method
    else:
        assert row.authorize_url is not None and row.token_url is not None
        authorize_url, token_url, revocation_url = row.authorize_url, row.token_url, row.revocation_url
        params = {}
        method = row.token_auth_method
    return oauth.ClientConfig(
        provider=row.provider,
        client_id=row.client_id,
        client_secret=secret,
        authorize_url=authorize_url,
        token_url=token_url,
        revocation_url=revocation_url,
        token_auth_method=cast(Any, method),
        scopes=list(row.scopes),
        authorize_params=params,
    )


def client_out(settings: Settings, row: IntegrationClient) -> ClientOut:
    config = client_config(settings, row)
    preset = PRESETS.get(row.provider)
    return ClientOut(
        provider=row.provider,
        name=row.name or (preset.name if preset else row.provider),
        client_id=row.client_id,
        client_secret=mask(config.client_secret) if config.client_secret else None,
        authorize_url=config.authorize_url,
        token_url=config.token_url,
        revocation_url=config.revocation_url,
        scopes=list(row.scopes),
        token_auth_method=config.token_auth_method,
        tenant=row.tenant,
        redirect_uri=callback_url(settings),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def put_client(
    session: AsyncSession, settings: Settings, context: OrgContext, provider: str, body: ClientBody
) -> IntegrationClient:
    _check_key(provider)
    preset = PRESETS.get(provider)
    endpoints = {"authorize_url": body.authorize_url, "token_url": body.token_url}
    if preset is not None:
        given = [k for k, v in {**endpoints, "revocation_url": body.revocation_url}.items() if v is not None]
        if given:
            raise BadRequest(
                f"{preset.name}'s endpoints are fixed ({', '.join(given)} given); configure a provider with "
                "other endpoints under a key of your own."
            )
        if body.tenant is not None and preset.default_tenant is None:
            raise BadRequest(f"tenant applies to Microsoft only, not to {preset.name}.")
    else:
        missing = [k for k, v in endpoints.items() if v is None]
        if missing:
            raise BadRequest(f"A custom provider needs {' and '.join(missing)}.")
        if not body.scopes:
            raise BadRequest("A custom provider needs its scopes (a list with at least one scope).")
        if body.tenant is not None:
            raise BadRequest("tenant applies to Microsoft only.")
        for name, value in (*endpoints.items(), ("revocation_url", body.revocation_url)):
            if value is not None:
                _check_endpoint(settings, name, value)

    row = await find_client(session, context.organization_id, provider)
    stored = row_secrets(settings, row).open_or_none("client_secret", row.client_secret) if row else None
    secret = body.client_secret
    if (
        secret is not None
        and stored is not None
        and (secret == mask(stored) or secret.startswith(MASK_PREFIX))
    ):
        secret = stored  # the masked hint sent back: keep
    elif secret is None:
        secret = stored
    if secret is None:
        raise BadRequest("client_secret is required (the provider issues it with the client id).")
    if secret.startswith(MASK_PREFIX):
        raise BadRequest("client_secret looks like a masked hint; send the secret itself.")

    if row is None:
        row = IntegrationClient(id=new_id("icl"), organization_id=context.organization_id, provider=provider)
        session.add(row)
    row.name = body.name
    row.client_id = body.client_id
    row.client_secret = row_secrets(settings, row).seal("client_secret", secret)
    row.scopes = list(body.scopes) if body.scopes else list(preset.default_scopes if preset else [])
    row.token_auth_method = body.token_auth_method or (
        preset.token_auth_method if preset else "client_secret_basic"
    )
    row.authorize_url = None if preset else body.authorize_url
    row.token_url = None if preset else body.token_url
    row.revocation_url = None if preset else body.revocation_url
    row.tenant = body.tenant if preset else None
    row.updated_by = context.actor_user_id
    await session.flush()
    await session.refresh(row)
    return row


async def delete_client(session: AsyncSession, context: OrgContext, provider: str) -> IntegrationClient:
    row = await get_client(session, context.organization_id, provider)
    connected = await session.scalar(
        scoped(IntegrationConnection, context.organization_id)
        .where(IntegrationConnection.provider == provider)
        .with_only_columns(IntegrationConnection.id)
    )
    if connected is not None:
        raise Conflict(
            f"The organization is still connected to {provider!r} ({connected}); disconnect it first."
        )
    await session.delete(row)
    await session.flush()
    return row


# --- connect and callback ------------------------------------------------------------------------


async def start_connect(
    session: AsyncSession, settings: Settings, context: OrgContext, provider: str, body: ConnectBody
) -> tuple[ConnectOut, OAuthState, BrowserCookie]:
    if not context.principal.is_user:
        raise Forbidden("Connecting an integration needs a person's token (the state is bound to a user).")
    row = await get_client(session, context.organization_id, provider)
    return_to = check_return_to(settings, body.return_to) if body.return_to is not None else None
    config = client_config(settings, row)
    if config.client_secret is None:
        raise Conflict(f"The client secret of {provider!r} no longer decrypts; store the client again.")
    scopes = list(body.scopes) if body.scopes is not None else config.scopes

    now = utcnow()
    # Pending states of anyone that expired an hour ago are of no use, even for a clear error message.
    await session.execute(delete(OAuthState).where(OAuthState.expires_at < now - timedelta(hours=1)))
    state = oauth.new_state()
    verifier = oauth.new_code_verifier()
    redirect_uri = callback_url(settings)
    pending = OAuthState(
        id=new_id("ost"),
        organization_id=context.organization_id,
        state_hash=sha256_hex(state),
        provider=provider,
        user_id=context.principal.id,
        redirect_uri=redirect_uri,
        return_to=return_to,
        scopes=scopes,
        expires_at=now + timedelta(seconds=settings.integrations_state_ttl_seconds),
        created_at=now,
    )
    pending.code_verifier = row_secrets(settings, pending).seal("code_verifier", verifier)
    # The state alone would let anyone who holds it finish the flow in their own browser (or lure a
    # victim's browser into finishing the attacker's flow): bind it to a cookie of the starting browser.
    browser_secret = secrets.token_urlsafe(32)
    pending.browser_hash = sha256_hex(browser_secret)
    session.add(pending)
    await session.flush()
    url = oauth.authorization_url(
        config, state=state, code_verifier=verifier, redirect_uri=redirect_uri, scopes=scopes
    )
    out = ConnectOut(
        authorization_url=url, state=state, expires_at=pending.expires_at, redirect_uri=redirect_uri
    )
    return out, pending, _browser_cookie(settings, pending.id, browser_secret)


@dataclass(frozen=True)
class CallbackParams:
    code: str | None
    state: str | None
    error: str | None
    error_description: str | None
    cookies: Mapping[str, str] = field(default_factory=dict)  # the browser's cookies on the callback


async def find_state(session: AsyncSession, state: str | None) -> OAuthState:
    """The pending state of a callback: missing, unknown, already used or expired → 400."""
    if not state:
        raise BadRequest(
            "The callback has no state; start again with POST /api/integrations/{provider}/connect."
        )
    row = await session.scalar(select(OAuthState).where(OAuthState.state_hash == sha256_hex(state)))
    if row is None:
        raise BadRequest("The state is not one this server issued (or it was removed long ago); start again.")
    if row.consumed_at is not None:
        raise BadRequest(ALREADY_USED)
    if row.expires_at <= utcnow():
        raise BadRequest("The state expired; the authorization has to complete within minutes. Start again.")
    return row


def check_browser(row: OAuthState, cookies: Mapping[str, str]) -> None:
    """400 unless the callback comes from the browser that started the connect (its cookie matches).

    The state is not used up: the person's own browser may still complete it.
    """
    if row.browser_hash is None:  # a state from before states were bound to browsers
        return
    presented = cookies.get(browser_cookie_name(row.id), "")
    if not presented or not constant_time_equals(sha256_hex(presented), row.browser_hash):
        raise BadRequest(
            "This authorization was started in another browser (its connect cookie is missing or does "
            "not match); start again with POST /api/integrations/{provider}/connect from the browser "
            "that completes it."
        )


ALREADY_USED = "This state was already used; each authorization can complete once. Start again."


async def claim_state(session: AsyncSession, state_id: str) -> bool:
    """Use the state up, atomically: of two callbacks racing with one state, one gets ``True``."""
    result = cast(
        CursorResult[Any],
        await session.execute(
            update(OAuthState)
            .where(OAuthState.id == state_id, OAuthState.consumed_at.is_(None))
            .values(consumed_at=utcnow())
            .execution_options(synchronize_session=False)
        ),
    )
    return result.rowcount == 1


@dataclass(frozen=True)
class _Pending:
    id: str
    organization_id: str
    user_id: str
    provider: str
    redirect_uri: str
    return_to: str | None
    scopes: list[str]


@dataclass(frozen=True)
class ClaimedCallback:
    """A callback whose state this request used up: the code may now be exchanged, once."""

    pending: _Pending
    config: oauth.ClientConfig
    verifier: str
    code: str


async def claim_callback(
    session: AsyncSession, settings: Settings, request: RequestFacts, params: CallbackParams
) -> ClaimedCallback:
    """Check the state and use it up, before anything goes to the provider: of callbacks racing with
    one state only the one that claims it exchanges the code; the others get 400. Whatever happens
    once the state is known uses it up; the caller must commit on errors too, and commit the claim
    before :func:`finish_callback` (no transaction is held while the provider answers)."""
    row = await find_state(session, params.state)
    check_browser(row, params.cookies)
    pending = _Pending(
        row.id,
        row.organization_id,
        row.user_id,
        row.provider,
        row.redirect_uri,
        row.return_to,
        list(row.scopes),
    )
    try:
        config, verifier = await _check_callback(session, settings, request, row, params)
    except ParleyError:
        await claim_state(session, pending.id)
        raise
    if not await claim_state(session, pending.id):
        raise BadRequest(ALREADY_USED)  # a concurrent callback with the same state got there first
    assert params.code is not None  # _check_callback refuses a callback without one
    return ClaimedCallback(pending, config, verifier, params.code)


async def finish_callback(
    session: AsyncSession, settings: Settings, request: RequestFacts, claimed: ClaimedCallback
) -> CallbackOut:
    """Exchange the claimed code (with the PKCE verifier) and store the tokens."""
    pending = claimed.pending
    tokens = await oauth.exchange_code(
        outbound_policy(settings),
        settings.outbound_timeout,
        claimed.config,
        code=claimed.code,
        code_verifier=claimed.verifier,
        redirect_uri=pending.redirect_uri,
    )

    provider = pending.provider
    connection = await session.scalar(
        scoped(IntegrationConnection, pending.organization_id).where(
            IntegrationConnection.provider == provider
        )
    )
    if connection is None:
        connection = IntegrationConnection(
            id=new_id("icn"), organization_id=pending.organization_id, provider=provider, refresh_token=None
        )
        session.add(connection)
    connection.connected_by = pending.user_id
    _store_tokens(settings, connection, tokens, default_scopes=pending.scopes, keep_refresh=False)
    connection.last_refreshed_at = None
    await session.flush()
    await session.refresh(connection)
    _audit(session, request, pending, connection.id, "integration_connected", scopes=connection.scopes)
    return CallbackOut(
        provider=provider,
        organization_id=pending.organization_id,
        connection_id=connection.id,
        scopes=list(connection.scopes),
        expires_at=connection.expires_at,
        return_to=pending.return_to,
        message=f"Connected {provider}; you can close this window.",
    )


async def _check_callback(
    session: AsyncSession, settings: Settings, request: RequestFacts, row: OAuthState, params: CallbackParams
) -> tuple[oauth.ClientConfig, str]:
    provider = row.provider
    if params.error:
        reason = oauth.clean_text(params.error, 80)
        if params.error_description:
            reason += f": {oauth.clean_text(params.error_description)}"
        _audit(session, request, row, None, "integration_authorization_declined", reason=reason)
        raise BadRequest(f"The provider {provider!r} did not grant access ({reason}). Start again to retry.")
    if not params.code:
        raise BadRequest("The callback has neither a code nor an error; start again.")
    role = await session.scalar(
        select(Membership.role).where(
            Membership.organization_id == row.organization_id, Membership.user_id == row.user_id
        )
    )
    if role is None or not Role(role).at_least(Role.admin):
        raise BadRequest("The person who started this authorization may no longer connect integrations here.")
    client = await find_client(session, row.organization_id, provider)
    if client is None:
        raise BadRequest(f"The client for {provider!r} was removed while the authorization was pending.")
    verifier = row_secrets(settings, row).open_or_none("code_verifier", row.code_verifier)
    config = client_config(settings, client)
    if verifier is None or config.client_secret is None:
        raise BadRequest(
            "The pending authorization cannot be completed (a secret no longer decrypts); start again."
        )
    return config, verifier


def _store_tokens(
    settings: Settings,
    row: IntegrationConnection,
    tokens: oauth.TokenSet,
    *,
    default_scopes: list[str],
    keep_refresh: bool,
) -> None:
    now = utcnow()
    row.access_token = row_secrets(settings, row).seal("access_token", tokens.access_token)
    if tokens.refresh_token is not None:
        row.refresh_token = row_secrets(settings, row).seal("refresh_token", tokens.refresh_token)
    elif not keep_refresh:
        row.refresh_token = None
    row.token_type = tokens.token_type
    row.expires_at = now + timedelta(seconds=tokens.expires_in) if tokens.expires_in else None
    row.scopes = tokens.scopes if tokens.scopes is not None else default_scopes
    row.status = "active"
    row.last_error = None


def _audit(
    session: AsyncSession,
    request: RequestFacts,
    pending: OAuthState | _Pending,
    connection_id: str | None,
    action: str,
    **details: Any,
) -> None:
    """The callback is a GET without a bearer token: it records its audit event itself."""
    audit.record(
        session,
        audit.event_values(
            request,
            organization_id=pending.organization_id,
            actor_type="user",
            actor_id=pending.user_id,
            action=action,
            resource_type="integration_connection",
            resource_id=connection_id,
            details={"provider": pending.provider, **details},
        ),
    )


# --- connections ---------------------------------------------------------------------------------


def connection_out(settings: Settings, row: IntegrationConnection) -> ConnectionOut:
    access = row_secrets(settings, row).open_or_none("access_token", row.access_token)
    refresh_token = row_secrets(settings, row).open_or_none("refresh_token", row.refresh_token)
    return ConnectionOut(
        id=row.id,
        provider=row.provider,
        status=cast(Any, row.status),
        scopes=list(row.scopes),
        token_type=row.token_type,
        access_token=mask(access) if access else MASK_PREFIX,
        refresh_token=mask(refresh_token) if refresh_token else None,
        expires_at=row.expires_at,
        last_refreshed_at=row.last_refreshed_at,
        last_error=row.last_error,
        connected_by=row.connected_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def get_connection(
    session: AsyncSession, organization_id: str, connection_id: str
) -> IntegrationConnection:
    return await get_owned(session, IntegrationConnection, connection_id, organization_id, "Connection")


async def disconnect(
    session: AsyncSession, settings: Settings, context: OrgContext, connection_id: str
) -> tuple[IntegrationConnection, str | None]:
    """Delete the connection; revoke its tokens first when the provider can. Returns the reason a
    revocation did not happen (``None`` when it did)."""
    row = await get_connection(session, context.organization_id, connection_id)
    client = await find_client(session, context.organization_id, row.provider)
    reason: str | None = "The provider's client is no longer configured."
    if client is not None:
        config = client_config(settings, client)
        refresh_token = row_secrets(settings, row).open_or_none("refresh_token", row.refresh_token)
        access = row_secrets(settings, row).open_or_none("access_token", row.access_token)
        # Revoking the refresh token ends the whole grant (RFC 7009 §2.1); else the access token.
        token, hint = (refresh_token, "refresh_token") if refresh_token else (access, "access_token")
        if token is None:
            reason = "The stored tokens no longer decrypt."
        else:
            reason = await oauth.revoke(
                outbound_policy(settings), settings.outbound_timeout, config, token, hint
            )
    await session.delete(row)
    await session.flush()
    if reason is not None:
        log.info("integration_not_revoked", provider=row.provider, connection_id=row.id)
    return row, reason


# --- access tokens and refresh -------------------------------------------------------------------


@dataclass(frozen=True)
class AccessToken:
    token: str
    token_type: str
    expires_at: datetime | None
    refreshed: bool


_LOCKS: dict[tuple[int, str], asyncio.Lock] = {}


def refresh_lock(connection_id: str) -> asyncio.Lock:
    """The in-process refresh lock of a connection (per event loop: asyncio locks belong to one)."""
    key = (id(asyncio.get_running_loop()), connection_id)
    return _LOCKS.setdefault(key, asyncio.Lock())


@dataclass(frozen=True)
class _Seen:
    """What a short read saw of a connection (the tokens opened), before deciding to refresh."""

    organization_id: str
    provider: str
    version: int
    status: str
    token_type: str
    expires_at: datetime | None
    lease_until: datetime | None
    access: str | None
    refresh: str | None
    last_error: str | None = None

    def current(self) -> AccessToken | None:
        if self.access is None:
            return None
        return AccessToken(self.access, self.token_type, self.expires_at, refreshed=False)

    def fresh(self, margin: float) -> bool:
        return self.expires_at is None or self.expires_at > utcnow() + timedelta(seconds=margin)


async def _look(
    db: Database, settings: Settings, organization_id: str | None, connection_id: str
) -> tuple[_Seen, oauth.ClientConfig | None]:
    """A short read of the connection and its client; another organization's connection is not found."""
    async with unit_of_work(db, write=False) as session:
        stmt = select(IntegrationConnection).where(IntegrationConnection.id == connection_id)
        if organization_id is not None:
            stmt = stmt.where(IntegrationConnection.organization_id == organization_id)
        row = await session.scalar(stmt)
        if row is None:
            raise NotFound(f"Connection {connection_id!r} was not found in this organization.")
        sealer = row_secrets(settings, row)
        seen = _Seen(
            organization_id=row.organization_id,
            provider=row.provider,
            version=row.version,
            status=row.status,
            token_type=row.token_type,
            expires_at=row.expires_at,
            lease_until=row.refresh_lease_until,
            access=sealer.open_or_none("access_token", row.access_token),
            refresh=sealer.open_or_none("refresh_token", row.refresh_token),
            last_error=row.last_error,
        )
        client = await find_client(session, row.organization_id, row.provider)
        return seen, client_config(settings, client) if client is not None else None


def _lease_seconds(settings: Settings) -> float:
    # Longer than the provider call can take (its time-out), so a lease only lapses when its holder died.
    return settings.outbound_timeout * 2 + 5


async def _claim(db: Database, settings: Settings, connection_id: str, version: int) -> bool:
    """Take the refresh lease: one short write, only from the version read and when no lease stands."""
    now = utcnow()
    async with unit_of_work(db) as session:
        result = cast(
            CursorResult[Any],
            await session.execute(
                update(IntegrationConnection)
                .where(
                    IntegrationConnection.id == connection_id,
                    IntegrationConnection.version == version,
                    (IntegrationConnection.refresh_lease_until.is_(None))
                    | (IntegrationConnection.refresh_lease_until < now),
                )
                .values(
                    version=version + 1,
                    refresh_lease_until=now + timedelta(seconds=_lease_seconds(settings)),
                )
                .execution_options(synchronize_session=False)
            ),
        )
        return result.rowcount == 1


async def _settle(
    db: Database,
    settings: Settings,
    connection_id: str,
    claimed: int,
    *,
    tokens: oauth.TokenSet | None = None,
    failure: str | None = None,
) -> bool:
    """The short write after the provider answered: store ``tokens`` (or mark ``failure``, or just give
    the lease back) if the row is still at the ``claimed`` version; False when another refresh took
    the lease over in the meantime (then nothing is written)."""
    async with unit_of_work(db) as session:
        result = cast(
            CursorResult[Any],
            await session.execute(
                update(IntegrationConnection)
                .where(IntegrationConnection.id == connection_id, IntegrationConnection.version == claimed)
                .values(version=claimed + 1, refresh_lease_until=None)
                .execution_options(synchronize_session=False)
            ),
        )
        if result.rowcount != 1:
            return False
        if tokens is None and failure is None:
            return True
        row = await session.get(IntegrationConnection, connection_id, populate_existing=True)
        if row is None:  # pragma: no cover - the update above just matched it
            return False
        if tokens is not None:
            _store_tokens(settings, row, tokens, default_scopes=list(row.scopes), keep_refresh=True)
            row.last_refreshed_at = utcnow()
        else:
            row.status = "refresh_failed"
            row.last_error = (failure or "")[:1000]
        await session.flush()
        return True


async def _refresh(
    db: Database, settings: Settings, connection_id: str, seen: _Seen, config: oauth.ClientConfig | None
) -> AccessToken | None:
    """Refresh from what ``seen`` saw; None when another process holds the lease (or just refreshed)."""
    if seen.refresh is None:
        raise Conflict(
            f"The {seen.provider!r} access token cannot be refreshed (the provider gave no refresh token); "
            "connect again."
        )
    if config is None:
        raise Conflict(f"The client for {seen.provider!r} was removed; configure it again to refresh tokens.")
    if not await _claim(db, settings, connection_id, seen.version):
        return None
    claimed = seen.version + 1
    try:
        # No transaction is open here: the provider may take its time without holding a row or a lock.
        tokens = await oauth.refresh(
            outbound_policy(settings), settings.outbound_timeout, config, seen.refresh
        )
    except oauth.OAuthProviderError as exc:
        fatal = exc.error in FATAL_REFRESH_ERRORS
        await _settle(db, settings, connection_id, claimed, failure=exc.detail if fatal else None)
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.shield(_settle(db, settings, connection_id, claimed))
        raise
    if not await _settle(db, settings, connection_id, claimed, tokens=tokens):
        # Our lease lapsed and another refresh took over; the token we got is valid all the same.
        log.warning("integration_refresh_lease_lost", connection_id=connection_id)
    expires_at = utcnow() + timedelta(seconds=tokens.expires_in) if tokens.expires_in else None
    return AccessToken(tokens.access_token, tokens.token_type, expires_at, refreshed=True)


async def access_token_for(
    db: Database,
    settings: Settings,
    connection: IntegrationConnection | str,
    *,
    organization_id: str | None = None,
    force: bool = False,
    margin: float = 30.0,
) -> AccessToken:
    """A usable access token of ``connection``, refreshed first when it expires within ``margin`` s
    (``force``: refreshed in any case, once per call). ``organization_id`` scopes the look-up (another
    organization's connection is not found).

    No transaction is held across the provider call: short reads decide, a short write claims the
    refresh lease (optimistic: from the version read, only when no lease stands), the provider is
    called with nothing open, and a short write stores the new tokens only if the row is still at the
    claimed version. Concurrent callers in this process wait for one refresh and reuse its result;
    another process that finds the lease taken uses the current token while it is still valid, or
    waits for the lease holder's tokens.

    Raises :class:`NotFound`, :class:`Conflict` (connect again: ``refresh_failed``, no refresh
    token, client removed), :class:`~parley.integrations.oauth.OAuthProviderError` (refused; a fatal
    refusal has marked the connection ``refresh_failed``) or another ``UpstreamError``.
    """
    connection_id = connection if isinstance(connection, str) else connection.id
    seen, _ = await _look(db, settings, organization_id, connection_id)
    _check_seen(seen)
    if not force and seen.fresh(margin) and seen.current() is not None:
        return cast(AccessToken, seen.current())
    async with refresh_lock(connection_id):
        deadline = utcnow() + timedelta(seconds=_lease_seconds(settings) + 1)
        while True:
            seen, config = await _look(db, settings, organization_id, connection_id)
            _check_seen(seen)
            current = seen.current()
            settled = seen.lease_until is None or seen.lease_until < utcnow()
            if current is not None and settled and not force and seen.fresh(margin):
                return current  # refreshed by someone else while this call waited
            token = await _refresh(db, settings, connection_id, seen, config) if settled else None
            if token is not None:
                return token
            # Another process holds the lease: its token is still good, or wait for the new one.
            if not force and current is not None and seen.fresh(0):
                return current
            if utcnow() > deadline:
                raise Conflict(
                    f"The {seen.provider!r} tokens are being refreshed by another process; try again."
                )
            await asyncio.sleep(0.2)


def _check_seen(seen: _Seen) -> None:
    if seen.status == "refresh_failed":
        raise Conflict(
            f"The {seen.provider!r} connection needs to be connected again: "
            f"{seen.last_error or 'the refresh failed'}"
        )


async def refresh_now(
    db: Database, settings: Settings, organization_id: str, connection_id: str
) -> IntegrationConnection:
    """``POST .../refresh``: refresh at once (outside any request transaction), answer the stored row."""
    await access_token_for(db, settings, connection_id, organization_id=organization_id, force=True)
    async with unit_of_work(db, write=False) as session:
        return await get_connection(session, organization_id, connection_id)


async def expiring_connection_ids(session: AsyncSession, margin: float) -> list[str]:
    rows = await session.scalars(
        select(IntegrationConnection.id).where(
            IntegrationConnection.status == "active",
            IntegrationConnection.refresh_token.is_not(None),
            IntegrationConnection.expires_at.is_not(None),
            IntegrationConnection.expires_at <= utcnow() + timedelta(seconds=margin),
        )
    )
    return list(rows.all())


async def refresh_expiring(db: Database, settings: Settings) -> tuple[int, int]:
    """Refresh every active connection whose token expires within the margin; (refreshed, failed)."""
    margin = settings.integrations_refresh_margin_seconds
    async with unit_of_work(db, write=False) as session:
        ids = await expiring_connection_ids(session, margin)
    refreshed = failed = 0
    for connection_id in ids:
        try:
            token = await access_token_for(db, settings, connection_id, margin=margin)
        except ParleyError as exc:
            failed += 1
            log.warning(
                "integration_refresh_failed", connection_id=connection_id, error_type=type(exc).__name__
            )
            continue
        refreshed += int(token.refreshed)
    return refreshed, failed


def connections_query(organization_id: str) -> Select[IntegrationConnection]:
    return scoped(IntegrationConnection, organization_id)
