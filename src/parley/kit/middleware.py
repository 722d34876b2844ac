"""Pure-ASGI middleware: request ids, access logs and metrics, and the request size limit (413)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import orjson
import structlog
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.kit import logging as kit_logging
from parley.kit.ids import new_id
from parley.kit.metrics import REQUEST_LATENCY, REQUESTS

log = structlog.get_logger("parley.http")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_SESSION_PATH = re.compile(r"^/api/sessions/(ses_[A-Za-z0-9]{1,36})(?:/|$)")


class _BodyTooLarge(StarletteHTTPException):
    """Raised from ``receive``: the app's HTTP exception handler turns it into the 413 error body."""


def _json_error(status: int, detail: str, code: str) -> tuple[Message, Message]:
    body = orjson.dumps({"detail": detail, "code": code})
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    return start, {"type": "http.response.body", "body": body}


_QUIET = frozenset({"/metrics", "/healthz", "/readyz"})
# The metric children of each (method, route, status): ``labels(...)`` takes a lock and builds a key.
_CHILDREN: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def _metrics_of(method: str, route: str, status: int) -> tuple[Any, Any]:
    children = _CHILDREN.get((method, route, status))
    if children is None:
        children = (REQUESTS.labels(method, route, str(status)), REQUEST_LATENCY.labels(method, route))
        if len(_CHILDREN) < 10_000:  # route templates, not paths: a small set
            _CHILDREN[(method, route, status)] = children
    return children


class RequestContextMiddleware:
    """Gives every request an id (``X-Request-Id``), logs one line per request and counts it.

    The id (and, on ``/api/sessions/{id}...`` paths, the session id) is bound to the logging context,
    so every log line written while serving the request or the WebSocket carries it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _REQUEST_ID.match(incoming) else new_id("req")
        scope.setdefault("state", {})["request_id"] = request_id
        context: dict[str, str] = {"request_id": request_id}
        session = _SESSION_PATH.match(scope["path"])
        if session is not None:
            context["session_id"] = session.group(1)
        if scope["type"] == "websocket":
            with structlog.contextvars.bound_contextvars(**context):
                await self.app(scope, receive, send)
            return
        structlog.contextvars.bind_contextvars(**context)
        started = time.perf_counter()
        status_holder = [500]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            counter, histogram = _metrics_of(scope["method"], template, status_holder[0])
            counter.inc()
            histogram.observe(elapsed)
            if template not in _QUIET and kit_logging.enabled_for(logging.INFO):
                log.info(
                    "request",
                    method=scope["method"],
                    route=template,
                    status=status_holder[0],
                    duration_ms=round(elapsed * 1000, 2),
                )
            structlog.contextvars.unbind_contextvars(*context)


class BodySizeLimitMiddleware:
    """Refuses bodies over the limit with 413, by Content-Length or while streaming, and reads every
    body whole before the app sees the request.

    ``per_path`` raises (or lowers) the limit for paths starting with a prefix, e.g. file uploads.

    Reading first means no handler, dependency or database transaction ever waits for a slow client:
    a body that has not arrived within ``read_timeout`` seconds is answered **408** and the request
    never reaches the app (a socket that sends 13 of 1,000 bytes and stalls holds nothing but itself).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        per_path: dict[str, int] | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self.app = app
        self.default_max_bytes = max_bytes
        self.per_path = sorted((per_path or {}).items(), key=lambda item: -len(item[0]))
        self.read_timeout = read_timeout

    def limit_for(self, path: str) -> int:
        return next(
            (limit for prefix, limit in self.per_path if path.startswith(prefix)), self.default_max_bytes
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.limit_for(scope["path"])
        detail = f"The request body is larger than the limit of {max_bytes} bytes."
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                too_large = int(length) > max_bytes
            except ValueError:
                too_large = False
            if too_large:
                start, body = _json_error(413, detail, "payload_too_large")
                await send(start)
                await send(body)
                return
        if self.read_timeout is not None and _has_body(scope):
            await self._read_first(scope, receive, send, max_bytes, detail)
            return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise _BodyTooLarge(413, detail)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                start, body = _json_error(413, detail, "payload_too_large")
                await send(start)
                await send(body)

    async def _read_first(
        self, scope: Scope, receive: Receive, send: Send, max_bytes: int, detail: str
    ) -> None:
        assert self.read_timeout is not None
        chunks: list[bytes] = []
        received = 0
        try:
            async with asyncio.timeout(self.read_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # the client went away before sending its body: nothing to answer
                    chunk = message.get("body", b"")
                    received += len(chunk)
                    if received > max_bytes:
                        start, body = _json_error(413, detail, "payload_too_large")
                        await send(start)
                        await send(body)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            start, body = _json_error(
                408,
                f"The request body did not arrive within {self.read_timeout:g} seconds; send it again.",
                "request_timeout",
            )
            # The client may still be sending: close the connection instead of reading the rest.
            start["headers"] = [*start["headers"], (b"connection", b"close")]
            await send(start)
            await send(body)
            return
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return whole
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    if b"transfer-encoding" in headers:
        return True
    length = headers.get(b"content-length", b"0")
    return length.strip() not in (b"", b"0")


def client_address(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None
