"""``GET /console``: the operator console, plain HTML, CSS and ES modules shipped in the package.

Like the playground it holds no secrets: the operator pastes a token or API key that the tab keeps in
``sessionStorage``, and every request it makes is an ordinary authenticated API call. The same strict
Content Security Policy applies (this origin only, no inline code, no framing). The routes are not part
of the API, so they stay out of the OpenAPI document.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import Path, Request
from starlette.responses import Response

from parley.kit.errors import NotFound
from parley.kit.routing import ParleyRouter
from parley.playground.router import content_security_policy

router = ParleyRouter(include_in_schema=False)

_JS = "text/javascript; charset=utf-8"
# The files the console is made of; nothing else under static/ is ever served.
ASSETS: dict[str, str] = {
    "app.js": _JS,
    "api.js": _JS,
    "i18n.js": _JS,
    "ui.js": _JS,
    "charts.js": _JS,
    "graph.js": _JS,
    "pages.js": _JS,
    "flows.js": _JS,
    "evals.js": _JS,
    "console.css": "text/css; charset=utf-8",
}


@cache
def _static(name: str) -> bytes:
    return resources.files("parley.console").joinpath("static", name).read_bytes()


def _headers(request: Request) -> dict[str, str]:
    return {
        # recordings are fetched with the Authorization header and played from blob: URLs
        "Content-Security-Policy": content_security_policy(request.headers.get("host")) + "; media-src blob:",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Permissions-Policy": "microphone=(self), camera=(), geolocation=(), payment=()",
        "Cache-Control": "no-cache",
    }


@router.get("/console")
async def console(request: Request) -> Response:
    """The console's page; everything after ``#`` is the console's own navigation."""
    return Response(_static("index.html"), media_type="text/html; charset=utf-8", headers=_headers(request))


@router.get("/console/{asset}")
async def console_asset(request: Request, asset: Annotated[str, Path(max_length=40)]) -> Response:
    """A script or the style sheet of the console (a fixed list of files)."""
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"The console has no file {asset!r}.")
    return Response(_static(asset), media_type=media_type, headers=_headers(request))
