"""OAuth 2.0 client mechanics (RFC 6749, PKCE RFC 7636, revocation RFC 7009) over the SSRF guard.

Every call to a provider goes through :func:`parley.kit.outbound.guarded_client`: the token and
revocation endpoints are organization-supplied URLs for custom providers, so they get the same
address checks, time-outs and body limits as any other outbound call.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from parley.integrations.catalog import TokenAuthMethod
from parley.kit.errors import UpstreamError, UpstreamTimeout
from parley.kit.outbound import OutboundPolicy, explain, guarded_client, read_limited

MAX_TOKEN_RESPONSE = 256 * 1024


@dataclass(frozen=True)
class ClientConfig:
    """Everything needed to talk to one provider on behalf of one organization (secret in clear)."""

    provider: str
    client_id: str
    client_secret: str | None
    authorize_url: str
    token_url: str
    revocation_url: str | None
    token_auth_method: TokenAuthMethod
    scopes: list[str]
    authorize_params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenSet:
    access_token: str
    token_type: str
    refresh_token: str | None
    expires_in: int | None
    scopes: list[str] | None


class OAuthProviderError(UpstreamError):
    """The provider refused a token request or answered something unusable (502 with its reason)."""

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        self.error = error


def new_code_verifier() -> str:
    """A PKCE code verifier: 86 characters of the unreserved alphabet (RFC 7636 allows 43-128)."""
    return secrets.token_urlsafe(64)


def s256_challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def new_state() -> str:
    return secrets.token_urlsafe(32)


def authorization_url(
    config: ClientConfig, *, state: str, code_verifier: str, redirect_uri: str, scopes: list[str]
) -> str:
    params: dict[str, str] = {
        **config.authorize_params,
        "response_type": "code",
        "client_id": config.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": s256_challenge(code_verifier),
        "code_challenge_method": "S256",
    }
    if scopes:
        params["scope"] = " ".join(scopes)
    return str(httpx.URL(config.authorize_url).copy_merge_params(params))


def clean_text(text: object, limit: int = 300) -> str:
    """Provider-supplied text, safe to show: printable, one line, bounded."""
    value = "".join(ch if ch.isprintable() else " " for ch in str(text)).strip()
    return value[:limit]


def _client_auth(config: ClientConfig, form: dict[str, str]) -> dict[str, str]:
    """Client authentication (RFC 6749 §2.3.1): HTTP Basic with form-encoded parts, or in the body."""
    headers = {"Accept": "application/json"}
    if config.client_secret is None:
        form["client_id"] = config.client_id  # a public client identifies itself
    elif config.token_auth_method == "client_secret_basic":  # noqa: S105
        user = quote(config.client_id, safe="")
        password = quote(config.client_secret, safe="")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    else:
        form["client_id"] = config.client_id
        form["client_secret"] = config.client_secret
    return headers


async def _post_form(
    policy: OutboundPolicy, seconds: float, url: str, config: ClientConfig, form: dict[str, str]
) -> tuple[int, bytes]:
    headers = _client_auth(config, form)
    try:
        async with (
            guarded_client(policy, timeout=seconds, max_redirects=0) as client,
            client.stream("POST", url, data=form, headers=headers) as response,
        ):
            return response.status_code, await read_limited(response, MAX_TOKEN_RESPONSE)
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(f"The provider {config.provider!r} did not answer in time.") from exc
    except httpx.HTTPError as exc:
        raise UpstreamError(f"The call to the provider {config.provider!r} failed: {explain(exc)}") from exc


def _parse_token_response(provider: str, status: int, body: bytes, what: str) -> TokenSet:
    try:
        data: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and "error" in data:
        error = clean_text(data.get("error"), 80)
        description = data.get("error_description")
        reason = f"{error}: {clean_text(description)}" if description else error
        raise OAuthProviderError(
            f"The provider {provider!r} refused the {what} (HTTP {status}): {reason}", error=error
        )
    if status != 200:
        snippet = clean_text(body.decode("utf-8", "replace"), 200) if body else "no body"
        raise OAuthProviderError(
            f"The provider {provider!r} answered the {what} with HTTP {status}: {snippet}"
        )
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("access_token"), str)
        or not data["access_token"]
    ):
        raise OAuthProviderError(
            f"The provider {provider!r} answered the {what} without an access token (not an OAuth 2.0 token response)."
        )
    expires_in = data.get("expires_in")
    if isinstance(expires_in, str) and expires_in.isdigit():
        expires_in = int(expires_in)  # some providers send a string
    scope = data.get("scope")
    refresh = data.get("refresh_token")
    return TokenSet(
        access_token=data["access_token"],
        token_type=clean_text(data.get("token_type") or "Bearer", 40),
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        expires_in=expires_in if isinstance(expires_in, int) and expires_in > 0 else None,
        scopes=scope.split() if isinstance(scope, str) else None,
    )


async def exchange_code(
    policy: OutboundPolicy,
    seconds: float,
    config: ClientConfig,
    *,
    code: str,
    code_verifier: str,
    redirect_uri: str,
) -> TokenSet:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": code_verifier,
    }
    status, body = await _post_form(policy, seconds, config.token_url, config, form)
    return _parse_token_response(config.provider, status, body, "authorization code")


async def refresh(
    policy: OutboundPolicy, seconds: float, config: ClientConfig, refresh_token: str
) -> TokenSet:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    status, body = await _post_form(policy, seconds, config.token_url, config, form)
    return _parse_token_response(config.provider, status, body, "refresh token")


async def revoke(
    policy: OutboundPolicy, seconds: float, config: ClientConfig, token: str, hint: str
) -> str | None:
    """Revoke ``token`` at the provider; ``None`` when it worked, otherwise the reason (never raises)."""
    if config.revocation_url is None:
        return "The provider has no revocation endpoint."
    try:
        status, body = await _post_form(
            policy, seconds, config.revocation_url, config, {"token": token, "token_type_hint": hint}
        )
    except UpstreamError as exc:
        return exc.detail
    if status == 200:
        return None
    return f"The provider answered the revocation with HTTP {status}: {clean_text(body.decode('utf-8', 'replace'), 200)}"
