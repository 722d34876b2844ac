"""Pure-ASGI middleware: request ids, access logs and metrics, and the request size limit (413)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import orjson
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.kit.ids import new_id
from parley.kit.metrics import REQUEST_LATENCY, REQUESTS

log = structlog.get_logger("parley.http")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_SESSION_PATH = re.compile(r"^/api/sessions/(ses_[A-Za-z0-9]{1,36})(?:/|$)")


def _json_error(status: int, detail: str, code: str) -> tuple[Message, Message]:
    body = orjson.dumps({"detail": detail, "code": code})
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    return start, {"type": "http.response.body", "body": body}


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
            REQUESTS.labels(scope["method"], template, str(status_holder[0])).inc()
            REQUEST_LATENCY.labels(scope["method"], template).observe(elapsed)
            if template not in ("/metrics", "/healthz", "/readyz"):
                log.info(
                    "request",
                    method=scope["method"],
                    route=template,
                    status=status_holder[0],
                    duration_ms=round(elapsed * 1000, 2),
                )
            structlog.contextvars.unbind_contextvars(*context)


class BodySizeLimitMiddleware:
    """Reads the whole body before the app runs: over the limit is 413, slower than ``read_timeout`` is 408.

    Reading it up front means no handler, dependency or database session is ever waiting on a slow
    client: authentication and the handler's transaction begin only once every byte is here (issue 18).
    ``per_path`` raises (or lowers) the limit for paths starting with a prefix, e.g. file uploads.
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
                await _send_error(send, 413, detail, "payload_too_large")
                return
        chunks: list[bytes] = []
        received = 0
        try:
            async with asyncio.timeout(self.read_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # the client went away before its body was complete: nothing to answer
                    chunk = message.get("body", b"")
                    received += len(chunk)
                    if received > max_bytes:
                        await _send_error(send, 413, detail, "payload_too_large")
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _send_error(
                send,
                408,
                f"The request body did not arrive within {self.read_timeout:g} seconds.",
                "request_timeout",
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: only the disconnect is left to wait for

        await self.app(scope, replay, send)


async def _send_error(send: Send, status: int, detail: str, code: str) -> None:
    start, body = _json_error(status, detail, code)
    await send(start)
    await send(body)


def client_address(scope: dict[str, Any]) -> str | None:
    client = scope.get("client")
    return client[0] if client else None
