"""``GET /playground``: a static page (plain HTML, CSS and JavaScript shipped in the package) for talking
to a flow from a browser, by microphone over the audio WebSocket or by typing.

The page holds no secrets: the visitor pastes a token (or API key) that stays in the tab's memory,
and every call it makes is an ordinary, authenticated API call. It is served with a strict Content
Security Policy (scripts, styles and connections to this origin only; no inline code; no framing).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import Path, Request
from starlette.responses import Response

from parley.kit.errors import ErrorBody, NotFound
from parley.kit.routing import ParleyRouter

router = ParleyRouter(tags=["Playground"])

# The files the page is made of; nothing else under static/ is ever served.
ASSETS: dict[str, str] = {
    "playground.js": "text/javascript; charset=utf-8",
    "pcm.js": "text/javascript; charset=utf-8",
    "voice.js": "text/javascript; charset=utf-8",
    "capture-worklet.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")


@cache
def _static(name: str) -> bytes:
    return resources.files("parley.playground").joinpath("static", name).read_bytes()


def content_security_policy(host: str | None) -> str:
    """The page's policy. ``connect-src`` names this host's WebSocket schemes too: browsers before
    CSP level 3 do not let ``'self'`` cover ``ws:``/``wss:``. A Host header that is not a plain host
    name is left out (the policy then only gets stricter)."""
    connect = ["'self'"]
    if host and _HOST.match(host):
        connect += [f"ws://{host}", f"wss://{host}"]
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src {' '.join(connect)}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def _headers(request: Request | None = None) -> dict[str, str]:
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "no-cache",
    }
    if request is not None:
        headers["Content-Security-Policy"] = content_security_policy(request.headers.get("host"))
        headers["Permissions-Policy"] = "microphone=(self), camera=(), geolocation=(), payment=()"
    return headers


@router.get(
    "/playground",
    summary="Playground",
    response_class=Response,
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}, "description": "The page."}},
)
async def playground(request: Request) -> Response:
    """The browser playground: paste a token, pick a flow, talk (microphone) or type. docs/playground.md."""
    return Response(_static("index.html"), media_type="text/html; charset=utf-8", headers=_headers(request))


@router.get(
    "/playground/{asset}",
    summary="Playground Asset",
    response_class=Response,
    responses={
        200: {
            "content": {
                "text/javascript": {"schema": {"type": "string"}},
                "text/css": {"schema": {"type": "string"}},
            },
            "description": "One of the page's scripts or its style sheet.",
        },
        404: {"model": ErrorBody, "description": "No such file of the playground."},
    },
)
async def playground_asset(
    asset: Annotated[str, Path(max_length=40, description="A file of the page, e.g. playground.js.")],
) -> Response:
    """A script or style sheet of the playground page (a fixed list of files)."""
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise NotFound(f"The playground has no file {asset!r}.")
    return Response(_static(asset), media_type=media_type, headers=_headers())
