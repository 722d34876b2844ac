"""A local OAuth 2.0 authorization server speaking the real protocol, for tests.

- ``GET /authorize``: the authorization endpoint. Checks the client, the redirect URI and PKCE (S256
  only), then redirects to ``redirect_uri`` with ``code`` and ``state``; with ``decision = "deny"`` it
  redirects with ``error=access_denied`` instead (what a person clicking "Cancel" causes).
- ``POST /token``: ``authorization_code`` (the code is single-use, bound to client and redirect URI,
  verified against the PKCE challenge) and ``refresh_token`` (rotating by default: a used refresh
  token is dead, as Google/Microsoft may do). Client authentication by ``client_secret_basic`` or
  ``client_secret_post``, whichever the client is registered with. Access tokens expire after
  ``access_ttl`` seconds. ``token_failure`` makes it answer a fixed status and body.
- ``POST /revoke``: RFC 7009 revocation (a revoked refresh token can no longer refresh).
- ``GET /userinfo``: a resource that only accepts a valid, unexpired access token.
- ``GET /calendar/events``, ``POST /calendar/events``: a protected calendar (RFC 6750 bearer-token
  semantics): no token → 401 with ``WWW-Authenticate: Bearer realm="calendar"``; a wrong, expired or
  revoked token → 401 with ``error="invalid_token"``; a token without the ``calendar`` scope → 403
  ``insufficient_scope``. A booking needs ``start`` (ISO time), ``minutes`` and ``name``; a slot that
  overlaps a booked one is 409. Bookings are kept in ``events``; the tokens that reached the calendar
  are in ``calendar_tokens``.

Every token request is recorded in ``grants`` so tests can count refreshes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import unquote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route


@dataclass
class StubClient:
    client_id: str
    client_secret: str
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"


@dataclass
class OAuth2Stub:
    clients: dict[str, StubClient] = field(default_factory=dict)
    access_ttl: int = 3600
    decision: Literal["allow", "deny"] = "allow"
    rotate_refresh_tokens: bool = True
    issue_refresh_tokens: bool = True
    token_failure: tuple[int, Any] | None = None
    refresh_delay: float = 0.0
    # (arrived, release): a refresh sets ``arrived`` and answers only once ``release`` is set
    refresh_gate: tuple[threading.Event, threading.Event] | None = None
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    access_tokens: dict[str, float] = field(default_factory=dict)
    refresh_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: list[dict[str, Any]] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    access_scopes: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    calendar_tokens: list[str] = field(default_factory=list)

    def reset(self) -> None:
        fresh = OAuth2Stub()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))

    def register(self, client: StubClient) -> StubClient:
        self.clients[client.client_id] = client
        return client

    def refreshes(self) -> list[dict[str, Any]]:
        return [g for g in self.grants if g["grant_type"] == "refresh_token"]

    def _issue(self, client_id: str, scope: str) -> dict[str, Any]:
        access = "at-" + secrets.token_urlsafe(24)
        self.access_tokens[access] = time.time() + self.access_ttl
        self.access_scopes[access] = scope
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.access_ttl,
            "scope": scope,
        }
        if self.issue_refresh_tokens:
            refresh = "rt-" + secrets.token_urlsafe(24)
            self.refresh_tokens[refresh] = {"client_id": client_id, "scope": scope, "active": True}
            body["refresh_token"] = refresh
        return body


def _oauth_error(error: str, description: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


def _authenticate(stub: OAuth2Stub, request: Request, form: dict[str, str]) -> StubClient | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        client = stub.clients.get(unquote(user))
        ok = client is not None and client.auth_method == "client_secret_basic"
        return client if ok and client and client.client_secret == unquote(password) else None
    client = stub.clients.get(form.get("client_id", ""))
    if client is None or client.auth_method != "client_secret_post":
        return None
    return client if form.get("client_secret") == client.client_secret else None


def build_app(stub: OAuth2Stub) -> Starlette:
    async def authorize(request: Request) -> Response:
        params = dict(request.query_params)
        stub.authorize_requests.append(params)
        client = stub.clients.get(params.get("client_id", ""))
        redirect_uri = params.get("redirect_uri")
        if client is None or not redirect_uri:
            return PlainTextResponse("unknown client or no redirect_uri", status_code=400)
        state = params.get("state", "")

        def back(**query: str) -> RedirectResponse:
            return RedirectResponse(f"{redirect_uri}?{urlencode({**query, 'state': state})}", status_code=302)

        if params.get("response_type") != "code":
            return back(error="unsupported_response_type")
        if params.get("code_challenge_method") != "S256" or not params.get("code_challenge"):
            return back(error="invalid_request", error_description="PKCE S256 is required")
        if stub.decision == "deny":
            return back(error="access_denied", error_description="The user declined the request")
        code = "code-" + secrets.token_urlsafe(16)
        stub.codes[code] = {
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "challenge": params["code_challenge"],
            "scope": params.get("scope", ""),
            "used": False,
            "expires": time.time() + 600,
        }
        return back(code=code)

    async def token(request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        grant_type = form.get("grant_type", "")
        auth_style = "basic" if "authorization" in request.headers else "post"
        stub.grants.append({"grant_type": grant_type, "auth": auth_style, **form})
        if stub.token_failure is not None:
            status, body = stub.token_failure
            if isinstance(body, dict):
                return JSONResponse(body, status_code=status)
            return PlainTextResponse(str(body), status_code=status)
        client = _authenticate(stub, request, form)
        if client is None:
            return _oauth_error("invalid_client", "Client authentication failed", 401)
        if grant_type == "authorization_code":
            entry = stub.codes.get(form.get("code", ""))
            if entry is None or entry["used"] or entry["expires"] < time.time():
                return _oauth_error("invalid_grant", "The code is unknown, expired or already used")
            entry["used"] = True
            if entry["client_id"] != client.client_id or entry["redirect_uri"] != form.get("redirect_uri"):
                return _oauth_error("invalid_grant", "The code was issued to another client or redirect_uri")
            verifier = form.get("code_verifier", "")
            digest = hashlib.sha256(verifier.encode()).digest()
            if base64.urlsafe_b64encode(digest).decode().rstrip("=") != entry["challenge"]:
                return _oauth_error("invalid_grant", "PKCE verification failed")
            return JSONResponse(stub._issue(client.client_id, entry["scope"]))
        if grant_type == "refresh_token":
            presented = form.get("refresh_token", "")
            entry = stub.refresh_tokens.get(presented)
            if entry is None or not entry["active"] or entry["client_id"] != client.client_id:
                return _oauth_error("invalid_grant", "The refresh token is invalid or was already used")
            if stub.refresh_delay:
                await asyncio.sleep(stub.refresh_delay)
            if stub.refresh_gate is not None:
                arrived, release = stub.refresh_gate
                arrived.set()
                await asyncio.to_thread(release.wait, 60)
            if not entry["active"]:  # spent by a concurrent request while this one waited
                return _oauth_error("invalid_grant", "The refresh token is invalid or was already used")
            body = stub._issue(client.client_id, entry["scope"])
            if stub.rotate_refresh_tokens:
                entry["active"] = False
            else:
                stub.refresh_tokens.pop(body.pop("refresh_token"), None)
            return JSONResponse(body)
        return _oauth_error("unsupported_grant_type", f"grant_type {grant_type!r} is not supported")

    async def revoke(request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        if _authenticate(stub, request, form) is None:
            return _oauth_error("invalid_client", "Client authentication failed", 401)
        value = form.get("token", "")
        stub.revoked.append(value)
        if value in stub.refresh_tokens:
            stub.refresh_tokens[value]["active"] = False
        stub.access_tokens.pop(value, None)
        return Response(status_code=200)

    async def userinfo(request: Request) -> Response:
        header = request.headers.get("authorization", "")
        access = header[7:] if header.lower().startswith("bearer ") else ""
        expires = stub.access_tokens.get(access)
        if expires is None or expires < time.time():
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        return JSONResponse({"sub": "user-1", "email": "user@example.com"})

    def bearer(request: Request) -> str | Response:
        """The presented access token, or the RFC 6750 §3 challenge that refuses it."""
        header = request.headers.get("authorization", "")
        if not header:
            return Response(status_code=401, headers={"WWW-Authenticate": 'Bearer realm="calendar"'})
        scheme, _, access = header.partition(" ")
        expires = stub.access_tokens.get(access) if scheme.lower() == "bearer" else None
        if expires is None or expires < time.time():
            challenge = (
                'Bearer realm="calendar", error="invalid_token", '
                'error_description="The access token is invalid, expired or revoked"'
            )
            return JSONResponse(
                {"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": challenge}
            )
        if "calendar" not in stub.access_scopes.get(access, "").split():
            challenge = 'Bearer realm="calendar", error="insufficient_scope", scope="calendar"'
            return JSONResponse(
                {"error": "insufficient_scope"}, status_code=403, headers={"WWW-Authenticate": challenge}
            )
        stub.calendar_tokens.append(access)
        return access

    async def calendar(request: Request) -> Response:
        access = bearer(request)
        if isinstance(access, Response):
            return access
        if request.method == "GET":
            return JSONResponse({"events": stub.events})
        try:
            data = await request.json()
            start = datetime.fromisoformat(str(data["start"]))
            minutes = int(data.get("minutes", 30))
            name = str(data["name"])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": "start (ISO time), minutes and name are required"}, status_code=400)
        end = start + timedelta(minutes=minutes)
        for event in stub.events:
            if start < datetime.fromisoformat(event["end"]) and datetime.fromisoformat(event["start"]) < end:
                return JSONResponse({"error": "slot_taken", "conflicts_with": event["id"]}, status_code=409)
        event = {
            "id": f"evt-{len(stub.events) + 1}",
            "start": start.isoformat(),
            "end": end.isoformat(),
            "name": name,
        }
        stub.events.append(event)
        return JSONResponse({"booked": True, "event": event}, status_code=201)

    return Starlette(
        routes=[
            Route("/authorize", authorize),
            Route("/token", token, methods=["POST"]),
            Route("/revoke", revoke, methods=["POST"]),
            Route("/userinfo", userinfo),
            Route("/calendar/events", calendar, methods=["GET", "POST"]),
        ]
    )
