"""Notification fixtures: real local receivers (HTTP webhook + Slack-compatible, SMTP via aiosmtpd) and
platform apps whose outbound allow-list lets them reach those receivers on loopback."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from parley.kit.jobs import runner_for
from tests.conftest import auth
from tests.live import free_port, serve_in_thread
from tests.organizations.test_router import ALICE, create_org

SMTP_USER = "parley"
SMTP_PASSWORD = "smtp-password-9876"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """What the local HTTP receiver saw; ``fail_first`` makes a path answer 500 that many times."""

    url: str = ""
    requests: list[Received] = field(default_factory=list)
    fail_first: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


def _receiver_app(state: Receiver) -> Starlette:
    async def record(request: Request) -> Received:
        received = Received(request.url.path, dict(request.headers), await request.body())
        with state.lock:
            state.requests.append(received)
        return received

    async def ok(request: Request) -> Response:
        await record(request)
        return JSONResponse({"received": True})

    async def flaky(request: Request) -> Response:
        await record(request)
        with state.lock:
            if state.fail_first[request.url.path] > 0:
                state.fail_first[request.url.path] -= 1
                return PlainTextResponse("temporarily broken", status_code=500)
        return PlainTextResponse("ok")

    async def status(request: Request) -> Response:
        await record(request)
        return PlainTextResponse("invalid_payload", status_code=int(request.path_params["code"]))

    async def slow(request: Request) -> Response:
        await record(request)
        await asyncio.sleep(3)
        return PlainTextResponse("late")

    async def redirect(request: Request) -> Response:
        await record(request)
        return Response(status_code=307, headers={"Location": "/hook/ok"})

    async def slack(request: Request) -> Response:
        # Slack's incoming webhooks answer "ok", or 400 "invalid_payload" / "no_text".
        received = await record(request)
        if request.headers.get("content-type", "").split(";")[0] != "application/json":
            return PlainTextResponse("invalid_payload", status_code=400)
        import json

        try:
            data = json.loads(received.body)
        except ValueError:
            return PlainTextResponse("invalid_payload", status_code=400)
        if not isinstance(data, dict) or not data.get("text"):
            return PlainTextResponse("no_text", status_code=400)
        return PlainTextResponse("ok")

    return Starlette(
        routes=[
            Route("/hook/ok", ok, methods=["POST"]),
            Route("/hook/flaky/{name}", flaky, methods=["POST"]),
            Route("/hook/status/{code:int}", status, methods=["POST"]),
            Route("/hook/slow", slow, methods=["POST"]),
            Route("/hook/redirect", redirect, methods=["POST"]),
            Route("/services/{rest:path}", slack, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    state = Receiver()
    with serve_in_thread(_receiver_app(state)) as url:
        state.url = url
        yield state


@dataclass
class Mailbox:
    host: str
    port: int
    messages: list[tuple[str, list[str], Message]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(
            (envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content))
        )
        return "250 Message accepted for delivery"

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address.startswith("full@"):
            return "452 Mailbox full, try later"
        if address.startswith("nobody@"):
            return "550 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"


def _authenticator(box: Mailbox) -> Callable[..., AuthResult]:
    def check(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        if isinstance(auth_data, LoginPassword) and (
            auth_data.login.decode() == SMTP_USER and auth_data.password.decode() == SMTP_PASSWORD
        ):
            box.logins.append(SMTP_USER)
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    return check


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[Mailbox]:
    """A real SMTP server on loopback (aiosmtpd) offering AUTH without TLS (tests only)."""
    box = Mailbox("127.0.0.1", free_port())
    controller = Controller(
        box,
        hostname=box.host,
        port=box.port,
        authenticator=_authenticator(box),
        auth_require_tls=False,
        auth_required=False,
    )
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class Platform:
    app: Any
    client: httpx.AsyncClient
    headers: dict[str, str]
    org: str
    database: Database

    async def drain(self) -> None:
        await runner_for(self.app.state).drain()


PlatformFactory = Callable[..., Any]

LOOPBACK = {
    "outbound_allowlist": ["127.0.0.1"],
    "notification_slack_hosts": ["127.0.0.1"],
    "notification_retry_seconds": [0.0],
    "notification_timeout": 1.0,
}


@pytest.fixture
async def make_platform(settings: Settings, database: Database) -> AsyncIterator[PlatformFactory]:
    """Platform apps over the test's database with settings changed; one organization, Alice owns it."""
    opened: list[httpx.AsyncClient] = []
    org: dict[str, str] = {}

    async def build(**overrides: Any) -> Platform:
        app = create_app(settings.model_copy(update=overrides), database=database)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
        opened.append(client)
        if not org:
            org["id"] = str((await create_org(client))["id"])
        return Platform(app, client, auth(ALICE, org["id"]), org["id"], database)

    yield build
    for client in opened:
        await client.aclose()


@pytest.fixture
async def platform(make_platform: PlatformFactory) -> Platform:
    """The platform with loopback allowed and immediate retries."""
    return await make_platform(**LOOPBACK)  # type: ignore[no-any-return]
