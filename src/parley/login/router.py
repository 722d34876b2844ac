"""``/api/auth/login``: "Sign in with <provider>" for the console (docs/console.md, docs/security.md).

Public routes (the person has no credential yet), counted per address. The start sets an HttpOnly
cookie binding the sign-in to this browser; the callback checks it, makes Parley's login token and
hands it over in a second HttpOnly cookie that only ``POST /api/auth/login/token`` reads (once), so the
token never appears in a URL. Failures go back to the console with a sentence it shows.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Query, Request
from starlette.responses import RedirectResponse, Response

from parley.auth.dependencies import limit_by_address
from parley.kit.errors import ParleyError, documented
from parley.kit.routing import ParleyRouter
from parley.login import service
from parley.login.schemas import LoginOptions, LoginToken

router = ParleyRouter(
    prefix="/api/auth/login", tags=["Organizations"], dependencies=[Depends(limit_by_address)]
)

START_PATH = "/api/auth/login/start"
TOKEN_PATH = "/api/auth/login/token"  # noqa: S105 (a path)


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _secure(request: Request) -> bool:
    settings = request.app.state.settings
    return (settings.public_url or str(request.base_url)).startswith("https://")


@router.get("", summary="Get Login Options", response_model=LoginOptions)
async def get_login_options(request: Request) -> LoginOptions:
    """Whether this server offers an identity provider's login (the console shows its button then)."""
    found = service.provider(request.app.state.settings)
    if found is None:
        return LoginOptions(enabled=False, provider=None, start_path=None)
    return LoginOptions(enabled=True, provider=found.name, start_path=START_PATH)


@router.get(
    "/start",
    summary="Start Login",
    response_class=RedirectResponse,
    status_code=302,
    responses={302: {"description": "To the identity provider's login page."}, **documented(404)},
)
async def start_login(request: Request) -> Response:
    """Sends the browser to the identity provider (authorization code flow with PKCE)."""
    location, cookie = service.start(request.app.state.settings, _base(request))
    response = RedirectResponse(location, status_code=302)
    response.set_cookie(
        service.STATE_COOKIE,
        cookie,
        max_age=service.STATE_TTL,
        path=service.CALLBACK_PATH,
        secure=_secure(request),
        httponly=True,
        samesite="lax",  # the provider's redirect back is a top-level navigation from another site
    )
    return response


@router.get(
    "/callback",
    summary="Finish Login",
    response_class=RedirectResponse,
    status_code=302,
    responses={302: {"description": "Back to the console, signed in or with the reason why not."}},
)
async def finish_login(
    request: Request,
    code: Annotated[str | None, Query(max_length=4000, description="Authorization code.")] = None,
    state: Annotated[str | None, Query(max_length=500, description="The state of the start.")] = None,
    error: Annotated[
        str | None, Query(max_length=200, description="OAuth error, e.g. access_denied.")
    ] = None,
    error_description: Annotated[str | None, Query(max_length=2000)] = None,
) -> Response:
    """Where the identity provider sends the browser back. No database work: nothing is stored."""
    settings = request.app.state.settings
    try:
        finished = await service.finish(
            settings,
            _base(request),
            code=code,
            state=state,
            error=error,
            error_description=error_description,
            cookie=request.cookies.get(service.STATE_COOKIE),
        )
    except ParleyError as exc:
        response = RedirectResponse(f"/console#/signin?error={quote(exc.detail)}", status_code=302)
        response.delete_cookie(service.STATE_COOKIE, path=service.CALLBACK_PATH)
        return response
    response = RedirectResponse("/console#/signin?done=1", status_code=302)
    response.delete_cookie(service.STATE_COOKIE, path=service.CALLBACK_PATH)
    response.set_cookie(
        service.TOKEN_COOKIE,
        service.handover(settings, finished),
        max_age=service.HANDOVER_TTL,
        path=TOKEN_PATH,
        secure=_secure(request),
        httponly=True,
        samesite="strict",  # only the console on this origin takes it over
    )
    return response


@router.post("/token", summary="Take Login Token", response_model=LoginToken, responses=documented(400))
async def take_login_token(request: Request, response: Response) -> LoginToken:
    """The token of the sign-in this browser just finished, once; the console keeps it in its tab."""
    finished = service.take_over(request.app.state.settings, request.cookies.get(service.TOKEN_COOKIE))
    response.delete_cookie(service.TOKEN_COOKIE, path=TOKEN_PATH)
    response.headers["Cache-Control"] = "no-store"
    return LoginToken(token=finished.token, expires_in=finished.expires_in, subject=finished.subject)
