"""The identity provider's authorization code flow, done by the server as a confidential client.

1. :func:`start` makes a random ``state`` and a PKCE verifier, puts both (with an expiry) in a value
   signed with a key derived from the platform's JWT secret, which the router sets as an HttpOnly cookie
   of the starting browser, and answers the provider's authorization URL.
2. :func:`finish` takes the provider's redirect: the state must match the cookie's (so a sign-in cannot
   be finished in another browser), the code is exchanged at the token endpoint with the verifier and
   the client's credentials, the access token asks the userinfo endpoint who signed in, and the answer
   is a Parley login JWT for that ``sub`` (the same kind ``parley token create`` makes).

Nothing is stored: the provider's tokens are dropped once the subject is known.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from parley.auth.tokens import mint_token
from parley.config import Settings
from parley.kit.errors import BadRequest, NotFound, UpstreamError
from parley.kit.outbound import explain, guarded_client, outbound_policy, read_limited

STATE_COOKIE = "parley_login"
TOKEN_COOKIE = "parley_login_token"  # noqa: S105 (a cookie name)
STATE_TTL = 600
HANDOVER_TTL = 120
CALLBACK_PATH = "/api/auth/login/callback"
_MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Provider:
    name: str
    authorize_url: str
    token_url: str
    userinfo_url: str
    client_id: str
    client_secret: str | None
    scopes: str


@dataclass(frozen=True)
class Finished:
    token: str
    subject: str
    expires_in: int


def provider(settings: Settings) -> Provider | None:
    """The configured provider, or None (also when no HS256 secret exists to sign Parley's token)."""
    if not (
        settings.login_client_id
        and settings.login_authorize_url
        and settings.login_token_url
        and settings.login_userinfo_url
        and settings.jwt_secret_value()
    ):
        return None
    secret = settings.login_client_secret.get_secret_value() if settings.login_client_secret else None
    return Provider(
        settings.login_provider_name,
        settings.login_authorize_url,
        settings.login_token_url,
        settings.login_userinfo_url,
        settings.login_client_id,
        secret,
        settings.login_scopes,
    )


def require(settings: Settings) -> Provider:
    found = provider(settings)
    if found is None:
        raise NotFound(
            "No identity provider's login is configured on this server (PARLEY_LOGIN_CLIENT_ID and the "
            "PARLEY_LOGIN_*_URL settings); sign in with a token or an API key."
        )
    return found


def redirect_uri(settings: Settings, request_base: str) -> str:
    return (settings.public_url or request_base).rstrip("/") + CALLBACK_PATH


def _key(settings: Settings) -> bytes:
    secret = settings.jwt_secret_value() or ""
    return hmac.new(secret.encode(), b"parley console login", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(settings: Settings, payload: dict[str, Any]) -> str:
    body = _b64(json.dumps(payload, separators=(",", ":")).encode())
    mac = _b64(hmac.new(_key(settings), body.encode(), hashlib.sha256).digest())
    return f"{body}.{mac}"


def unseal(settings: Settings, value: str | None, kind: str) -> dict[str, Any] | None:
    """The payload of a cookie this server sealed, if untampered, of this ``kind`` and not expired."""
    if not value or value.count(".") != 1:
        return None
    body, mac = value.split(".")
    wanted = _b64(hmac.new(_key(settings), body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(mac.encode(), wanted.encode()):  # bytes: a non-ASCII cookie is no 500
        return None
    try:
        payload = json.loads(_unb64(body))
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("kind") != kind:
        return None
    if not isinstance(payload.get("exp"), int) or payload["exp"] < time.time():
        return None
    return payload


def start(settings: Settings, request_base: str) -> tuple[str, str]:
    """The provider's authorization URL and the sealed cookie value binding it to this browser."""
    found = require(settings)
    state = secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(48)
    challenge = _b64(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": found.client_id,
        "redirect_uri": redirect_uri(settings, request_base),
        "scope": found.scopes,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    separator = "&" if "?" in found.authorize_url else "?"
    cookie = seal(
        settings, {"kind": "state", "state": state, "verifier": verifier, "exp": int(time.time()) + STATE_TTL}
    )
    return f"{found.authorize_url}{separator}{urlencode(query)}", cookie


async def _json(response: httpx.Response, what: str) -> dict[str, Any]:
    body = await read_limited(response, _MAX_BODY)
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if response.status_code >= 400 or not isinstance(data, dict):
        reason = ""
        if isinstance(data, dict):
            reason = str(data.get("error_description") or data.get("error") or "")[:200]
        raise UpstreamError(
            f"The identity provider's {what} answered {response.status_code}"
            + (f" ({reason})" if reason else "")
            + "; sign in again, or ask your administrator to check the login settings."
        )
    return data


async def finish(
    settings: Settings,
    request_base: str,
    *,
    code: str | None,
    state: str | None,
    error: str | None,
    error_description: str | None,
    cookie: str | None,
) -> Finished:
    """Checks the provider's answer against this browser's pending sign-in and makes Parley's token."""
    found = require(settings)
    pending = unseal(settings, cookie, "state")
    if pending is None:
        raise BadRequest(
            "This sign-in was not started in this browser, or it took longer than "
            f"{STATE_TTL // 60} minutes; start it again from the console."
        )
    if not state or not hmac.compare_digest(str(pending["state"]).encode(), state.encode()):
        raise BadRequest("The sign-in's state does not match the one this browser started; start it again.")
    if error:
        detail = f" ({error_description[:200]})" if error_description else ""
        raise BadRequest(f"The identity provider did not sign you in: {error}{detail}.")
    if not code:
        raise BadRequest("The identity provider sent no authorization code; start the sign-in again.")
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri(settings, request_base),
        "code_verifier": str(pending["verifier"]),
    }
    auth = None
    if found.client_secret is not None:
        auth = httpx.BasicAuth(found.client_id, found.client_secret)
    else:
        form["client_id"] = found.client_id  # a public client: PKCE alone
    try:
        async with guarded_client(outbound_policy(settings)) as client:
            async with client.stream("POST", found.token_url, data=form, auth=auth) as response:
                grant = await _json(response, "token endpoint")
            access = grant.get("access_token")
            if not isinstance(access, str) or not access:
                raise UpstreamError("The identity provider's token endpoint answered no access token.")
            headers = {"Authorization": f"Bearer {access}", "Accept": "application/json"}
            async with client.stream("GET", found.userinfo_url, headers=headers) as response:
                info = await _json(response, "userinfo endpoint")
    except httpx.HTTPError as exc:
        raise UpstreamError(f"The identity provider cannot be reached: {explain(exc)}.") from exc
    subject = info.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > 200:
        raise UpstreamError("The identity provider's userinfo names no subject (sub).")
    email = info.get("email") if isinstance(info.get("email"), str) else None
    name = info.get("name") if isinstance(info.get("name"), str) else None
    ttl = settings.login_token_ttl_seconds
    token = mint_token(settings, subject=subject, email=email, name=name, ttl_seconds=ttl)
    return Finished(token, subject, ttl)


def handover(settings: Settings, finished: Finished) -> str:
    """The sealed cookie that carries the finished sign-in to the console (read once, within minutes)."""
    return seal(
        settings,
        {
            "kind": "token",
            "token": finished.token,
            "sub": finished.subject,
            "ttl": finished.expires_in,
            "exp": int(time.time()) + HANDOVER_TTL,
        },
    )


def take_over(settings: Settings, cookie: str | None) -> Finished:
    payload = unseal(settings, cookie, "token")
    if payload is None:
        raise BadRequest(
            "No finished sign-in is waiting in this browser (it is handed over once, within "
            f"{HANDOVER_TTL // 60} minutes); sign in again."
        )
    return Finished(str(payload["token"]), str(payload["sub"]), int(payload["ttl"]))
