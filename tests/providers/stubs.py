"""Loopback stand-ins for the providers, each speaking its real protocol and checking credentials."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jwt
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.live import free_port

OPENAI_KEY = "sk-test-openai-0123456789"
TWILIO_SID = "AC" + "0123456789abcdef" * 2
TWILIO_TOKEN = "twilio-auth-token-abcdef"
LIVEKIT_KEY = "APIlivekitkey"
LIVEKIT_SECRET = "livekit-secret-" + "s" * 32
DEEPGRAM_KEY = "dg-key-0123456789"
ELEVENLABS_KEY = "xi-key-0123456789"
SMTP_USER = "mailer"
SMTP_PASSWORD = "smtp-password-123"


def _unauthorized(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=401)


async def openai_models(request: Request) -> JSONResponse:
    if request.headers.get("authorization") != f"Bearer {OPENAI_KEY}":
        return _unauthorized("Incorrect API key provided")
    return JSONResponse(
        {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}, {"id": "whisper-1"}]}
    )


async def twilio_account(request: Request) -> JSONResponse:
    expected = base64.b64encode(f"{TWILIO_SID}:{TWILIO_TOKEN}".encode()).decode()
    if request.headers.get("authorization") != f"Basic {expected}":
        return JSONResponse({"code": 20003, "message": "Authenticate", "status": 401}, status_code=401)
    if request.path_params["sid"] != TWILIO_SID:
        return JSONResponse({"code": 20404, "status": 404}, status_code=404)
    return JSONResponse({"sid": TWILIO_SID, "friendly_name": "Werkstatt", "status": "active"})


async def livekit_list_rooms(request: Request) -> JSONResponse:
    header = request.headers.get("authorization", "")
    if not header.startswith("Bearer ") or request.headers.get("content-type") != "application/json":
        return JSONResponse({"code": "unauthenticated", "msg": "no token"}, status_code=401)
    try:
        claims: dict[str, Any] = jwt.decode(
            header.removeprefix("Bearer "), LIVEKIT_SECRET, algorithms=["HS256"], options={"require": ["exp"]}
        )
    except jwt.PyJWTError:
        return JSONResponse({"code": "unauthenticated", "msg": "invalid token"}, status_code=401)
    if claims.get("iss") != LIVEKIT_KEY or not claims.get("sub"):
        return JSONResponse({"code": "unauthenticated", "msg": "unknown key"}, status_code=401)
    if claims.get("video", {}).get("roomList") is not True:
        return JSONResponse({"code": "permission_denied", "msg": "no roomList grant"}, status_code=403)
    return JSONResponse({"rooms": [{"sid": "RM_1", "name": "call-1"}]})


async def deepgram_projects(request: Request) -> JSONResponse:
    if request.headers.get("authorization") != f"Token {DEEPGRAM_KEY}":
        return _unauthorized("Invalid credentials")
    return JSONResponse({"projects": [{"project_id": "p1", "name": "Parley"}]})


async def elevenlabs_user(request: Request) -> JSONResponse:
    if request.headers.get("xi-api-key") != ELEVENLABS_KEY:
        return _unauthorized("invalid_api_key")
    return JSONResponse({"subscription": {"tier": "free"}})


async def not_json(request: Request) -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse("<html>hello</html>")


stub_app = Starlette(
    routes=[
        Route("/v1/models", openai_models),
        Route("/2010-04-01/Accounts/{sid}.json", twilio_account),
        Route("/twirp/livekit.RoomService/ListRooms", livekit_list_rooms, methods=["POST"]),
        Route("/v1/projects", deepgram_projects),
        Route("/v1/user", elevenlabs_user),
        Route("/html/models", not_json),
    ]
)


class _Authenticator:
    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == SMTP_USER
            and auth_data.password.decode() == SMTP_PASSWORD
        ):
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False)


class _Sink:
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        return "250 OK"


@contextmanager
def smtp_server() -> Iterator[int]:
    """An SMTP server on loopback that offers AUTH LOGIN/PLAIN without TLS, and no STARTTLS."""
    port = free_port()
    controller = Controller(
        _Sink(),
        hostname="127.0.0.1",
        port=port,
        authenticator=_Authenticator(),
        auth_require_tls=False,
        server_hostname="smtp.test",
    )
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
