"""Typed errors that carry their HTTP status, and the one set of exception handlers.

Every error response has FastAPI's shape plus a machine code: ``{"detail": "...", "code": "..."}``.
Validation errors keep FastAPI's 422 ``detail`` list. Internal errors never leak ``str(exc)``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from parley.kit.metrics import DB_UNAVAILABLE
from parley.kit.responses import JSONBytesResponse

log = structlog.get_logger("parley.errors")


class ErrorBody(BaseModel):
    detail: str
    code: str


class ParleyError(Exception):
    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers


class BadRequest(ParleyError):
    status_code = 400
    code = "bad_request"


class Unauthorized(ParleyError):
    status_code = 401
    code = "unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": "Bearer"})


class Forbidden(ParleyError):
    status_code = 403
    code = "forbidden"


class NotFound(ParleyError):
    status_code = 404
    code = "not_found"


class Conflict(ParleyError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(ParleyError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(ParleyError):
    status_code = 415
    code = "unsupported_media_type"


class Unprocessable(ParleyError):
    """A 422 raised by a service; answered in FastAPI's validation shape like every other 422."""

    status_code = 422
    code = "unprocessable"

    def __init__(self, detail: str, *, loc: tuple[str | int, ...] = ("body",)) -> None:
        super().__init__(detail)
        self.loc = loc


class TooManyRequests(ParleyError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(max(1, retry_after))})


class UpstreamError(ParleyError):
    status_code = 502
    code = "upstream_error"


class ServiceUnavailable(ParleyError):
    status_code = 503
    code = "service_unavailable"


class UpstreamTimeout(ParleyError):
    status_code = 504
    code = "upstream_timeout"


class InvalidFields(RequestValidationError):
    """A 422 with FastAPI's validation ``detail`` list, for fields a service checks itself (a flow
    that does not validate, a tool listed twice): services raise this and import no FastAPI."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def error_response(
    status: int, detail: str, code: str, headers: dict[str, str] | None = None
) -> JSONBytesResponse:
    return JSONBytesResponse({"detail": detail, "code": code}, status_code=status, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method the OpenAPI document declares for the request's path (the routes themselves are
    spread over included routers; the document is built once and cached by FastAPI)."""
    patterns: list[tuple[re.Pattern[str], set[str]]] | None = getattr(
        request.app.state, "allow_patterns", None
    )
    if patterns is None:
        patterns = []
        for template, item in request.app.openapi().get("paths", {}).items():
            regex = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
            patterns.append((re.compile(f"^{regex}$"), {m.upper() for m in item}))
        request.app.state.allow_patterns = patterns
    methods: set[str] = set()
    for pattern, declared in patterns:
        if pattern.match(request.url.path):
            methods |= declared
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ParleyError)
    async def _parley_error(request: Request, exc: ParleyError) -> JSONBytesResponse:
        if isinstance(exc, Unprocessable):
            # The documented 422 body is FastAPI's list, never a string detail.
            item = {"type": exc.code, "loc": list(exc.loc), "msg": exc.detail, "input": None}
            return JSONBytesResponse({"detail": [item]}, status_code=422)
        return error_response(exc.status_code, exc.detail, exc.code, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONBytesResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "Request failed."
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"No route matches {request.method} {request.url.path}."
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}."
            # Starlette names only the first route that matched the path; a path served by several
            # routes (GET and POST handlers) allows all of their methods.
            headers["Allow"] = ", ".join(_allowed_methods(request))
        code = _HTTP_CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, detail, code, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONBytesResponse:
        return JSONBytesResponse({"detail": _jsonable_errors(exc.errors())}, status_code=422)

    async def _database_unavailable(request: Request, exc: Exception) -> JSONBytesResponse:
        # Connection loss, a restarting server, SQLite's "database is locked": retryable, not a bug.
        cause = exc.orig if isinstance(exc, DBAPIError) else exc
        log.warning(
            "database_unavailable",
            error_type=type(cause).__name__,
            # SQLite's extended result code tells which kind of busy or lock it was (None elsewhere).
            sqlite_code=getattr(cause, "sqlite_errorcode", None),
            path=request.url.path,
        )
        DB_UNAVAILABLE.labels(type(cause).__name__).inc()
        return error_response(
            503,
            "A backing service (the database or storage) is busy or unavailable; the request was not applied. Retry shortly.",
            "service_unavailable",
            {"Retry-After": "2"},
        )

    # asyncpg raises connection failures as plain OSErrors before SQLAlchemy can wrap them.
    for unavailable in (OperationalError, InterfaceError, PoolTimeout, ConnectionError, TimeoutError):
        app.add_exception_handler(unavailable, _database_unavailable)

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError) -> JSONBytesResponse:
        # A connection lost mid-statement (the server restarted), a server that is starting or shutting
        # down, a statement time-out: the database's state, not a bug in the request.
        if is_unavailable(exc):
            return await _database_unavailable(request, exc)
        return await _unexpected(request, exc)

    async def _unexpected(request: Request, exc: Exception) -> JSONBytesResponse:
        # Logged with its type only: exception text may carry secrets or personal data.
        log.error("unhandled_error", error_type=type(exc).__name__, path=request.url.path, exc_info=exc)
        return error_response(500, "Internal server error. The request was not applied.", "internal_error")

    @app.exception_handler(ClientDisconnect)
    async def _client_left(request: Request, exc: ClientDisconnect) -> JSONBytesResponse:
        # The client hung up while sending its body: nothing was applied and nobody reads the answer.
        # Not a server error; counted and logged quietly so a flaky mobile network does not page anyone.
        log.info("client_disconnected", path=request.url.path, method=request.method)
        return error_response(
            400,
            "The client closed the connection before its request body arrived; nothing was applied.",
            "bad_request",
        )

    app.add_exception_handler(Exception, _unexpected)


# SQLSTATE classes of a database that is (temporarily) not serving: 08 connection exception,
# 57 operator intervention (admin shutdown, cannot connect now, query canceled by statement_timeout),
# 53 insufficient resources (too many connections), 40 transaction rollback (serialization, deadlock).
_UNAVAILABLE_SQLSTATE_CLASSES = ("08", "57", "53", "40")


def is_unavailable(exc: DBAPIError) -> bool:
    """Whether a database error means "unavailable, retry" rather than a bug (see the classes above)."""
    if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    if isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
        return True
    cause = exc.orig.__cause__ if exc.orig is not None else None
    return type(cause).__name__ in ("ConnectionDoesNotExistError", "ConnectionFailureError") or isinstance(
        cause, OSError | TimeoutError
    )


def _jsonable_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic error dicts may hold exceptions in ``ctx``; turn those into strings."""
    out: list[dict[str, Any]] = []
    errors = list(errors)
    if len(errors) > MAX_ECHO_ERRORS:
        # A body with ten thousand unknown fields must not get ten thousand errors back.
        more = len(errors) - MAX_ECHO_ERRORS
        summary = {
            "type": "too_many_errors",
            "loc": ("body",),
            "msg": f"… and {more} more errors.",
            "input": None,
        }
        errors = [*errors[:MAX_ECHO_ERRORS], summary]
    for error in errors:
        item = dict(error)
        ctx = item.get("ctx")
        if isinstance(ctx, dict):
            item["ctx"] = {
                k: (v if isinstance(v, str | int | float | bool | None) else str(v)) for k, v in ctx.items()
            }
        if "input" in item:
            item["input"] = shortened(item["input"])
        item.pop("url", None)
        out.append(item)
    return out


MAX_ECHO_ERRORS = 50
MAX_ECHO_CHARS = 200
MAX_ECHO_ITEMS = 20
_ECHO_DEPTH = 3


def shortened(value: Any, depth: int = 0) -> Any:
    """A validation error's ``input`` cut down so an error body never echoes a request body in full:
    strings to ``MAX_ECHO_CHARS`` characters, objects and lists to ``MAX_ECHO_ITEMS`` entries, three
    levels deep ("…" marks what was left out)."""
    if isinstance(value, bytes):
        value = value[: MAX_ECHO_CHARS * 4].decode("utf-8", "replace")
    if isinstance(value, str):
        return value if len(value) <= MAX_ECHO_CHARS else value[:MAX_ECHO_CHARS] + "…"
    if isinstance(value, dict | list | tuple):
        if depth >= _ECHO_DEPTH:
            return "…"
        if isinstance(value, dict):
            items = list(value.items())
            short = {str(k)[:MAX_ECHO_CHARS]: shortened(v, depth + 1) for k, v in items[:MAX_ECHO_ITEMS]}
            if len(items) > MAX_ECHO_ITEMS:
                short["…"] = f"{len(items) - MAX_ECHO_ITEMS} more"
            return short
        listed = [shortened(v, depth + 1) for v in list(value)[:MAX_ECHO_ITEMS]]
        if len(value) > MAX_ECHO_ITEMS:
            listed.append(f"… {len(value) - MAX_ECHO_ITEMS} more")
        return listed
    return value


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "The request is malformed or ambiguous."},
    401: {"model": ErrorBody, "description": "Missing, invalid or expired credentials."},
    403: {"model": ErrorBody, "description": "The caller's role does not allow this."},
    404: {"model": ErrorBody, "description": "No such resource in the active organization."},
    413: {"model": ErrorBody, "description": "The request body is too large."},
    415: {"model": ErrorBody, "description": "The body's media type is not accepted."},
    429: {"model": ErrorBody, "description": "Rate limit exceeded; see Retry-After."},
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route can answer beyond the common ones."""
    descriptions = {
        409: "The request conflicts with the resource's current state.",
        502: "An upstream service failed.",
        503: "A dependency is unavailable; retry later.",
        504: "An upstream service timed out.",
    }
    return {s: {"model": ErrorBody, "description": descriptions.get(s, "Error.")} for s in statuses}
