"""The connector's ASGI application: a raw-ASGI fast path in front of a regular FastAPI app.

Why two layers: the order GET is a tool call made while a caller waits on the phone, and FastAPI's
parameter machinery alone costs about three quarters of the throughput (see docs/benchmarks.md). The
fast path serves only the common, well-formed request: ``GET /api/orders/<digits>`` with no query
string and an ``X-API-Key`` header. Anything else (a bad id, a missing key, a query string, another
path or method) goes to the FastAPI app unchanged, which owns validation, the documented 422 body and
the OpenAPI description. Both layers share one :class:`OrderGate`, so authorization, rate limits and
response bytes are the same whichever layer answers.
"""

# No `from __future__ import annotations`: FastAPI must resolve the closures in route signatures.
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, Path, Request, Security
from fastapi.responses import Response
from fastapi.security import APIKeyHeader
from starlette.types import Receive, Scope, Send

from parley.connector.config import ConnectorSettings
from parley.connector.errors import ConnectorError, OrderNotFound, StoreUnavailable, envelope_error
from parley.connector.repository import Absent, OrderStore, make_store
from parley.connector.schemas import ErrorEnvelope, Health, OrderEnvelope
from parley.connector.service import OrderGate, reject_key_in_query
from parley.kit import logging as kit_logging

log = structlog.get_logger("parley.connector")

ORDER_PATH_PREFIX = "/api/orders/"
MAX_ORDER_ID = 2**63 - 1  # the id column is a signed 64-bit integer
_MAX_ID_DIGITS = len(str(MAX_ORDER_ID))
_JSON = (b"content-type", b"application/json")
# Orders carry personal data: no shared cache may keep them.
_NO_STORE = (b"cache-control", b"no-store")
NO_STORE_HEADERS = {"Cache-Control": "no-store"}

_ERROR_DOCS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorEnvelope, "description": "An API key was sent in the query string."},
    401: {"model": ErrorEnvelope, "description": "Missing, unknown or revoked X-API-Key."},
    404: {"model": ErrorEnvelope, "description": "No order with this id."},
    429: {
        "model": ErrorEnvelope,
        "description": "Per-key rate limit exceeded, or too many failed attempts with this key.",
        "headers": {
            "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
        },
    },
    503: {"model": ErrorEnvelope, "description": "The order database is unreachable."},
}


def _client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


_ORGANIZATION_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ORGANIZATION_HEADER = "x-parley-organization"


def _organization(value: str | None) -> str:
    """The organization the platform acts for (X-Parley-Organization), or ``-``; never trusted for access."""
    return value if value and _ORGANIZATION_RE.match(value) else "-"


def _build_api(settings: ConnectorSettings, gate: OrderGate, store: OrderStore) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            await store.open()
        except StoreUnavailable:
            log.warning("connector.store_unavailable_at_start")  # requests answer 503 until it is back
        try:
            yield
        finally:
            await store.close()

    api = FastAPI(
        title="Parley order connector",
        version="1.0.0",
        description="Returns one repair-shop order (customer, vehicle and scheduling data) for an order id.",
        lifespan=lifespan,
    )
    key_header = APIKeyHeader(
        name="X-API-Key", auto_error=False, description="A connector key from `parley connector keys create`."
    )

    async def require_key(request: Request, key: Annotated[str | None, Security(key_header)]) -> str:
        # A dependency runs before path parameters are validated: the key is checked before the id.
        reject_key_in_query(request.query_params.keys())
        organization = _organization(request.headers.get(ORGANIZATION_HEADER))
        return await gate.authorize(key, _client_address(request.scope), organization)

    @api.exception_handler(ConnectorError)
    async def _connector_error(_request: Request, exc: ConnectorError) -> Response:
        if isinstance(exc, StoreUnavailable):
            log.warning("connector.store_unavailable")
        return Response(
            exc.body(),
            status_code=exc.status_code,
            media_type="application/json",
            headers={**exc.headers, **NO_STORE_HEADERS},
        )

    @api.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Response:
        # Only the type is logged: the text of an internal error may carry personal data.
        log.error("connector.unexpected_error", error_type=type(exc).__name__)
        return Response(
            envelope_error("Internal error; the request was not processed."),
            status_code=500,
            media_type="application/json",
        )

    @api.get(
        "/api/orders/{order_id}",
        response_model=OrderEnvelope,
        responses=_ERROR_DOCS,
        tags=["Orders"],
        summary="Get order details",
        operation_id="get_order_details",
        description="Retrieves customer, vehicle and scheduling data of the order identified by order_id.",
    )
    async def get_order(
        order_id: Annotated[int, Path(ge=1, le=MAX_ORDER_ID, description="The order number.")],
        _caller: Annotated[str, Depends(require_key)],
    ) -> Response:
        return Response(
            await gate.order_body(order_id), media_type="application/json", headers=NO_STORE_HEADERS
        )

    @api.get(
        "/healthz",
        response_model=Health,
        tags=["System"],
        summary="Liveness and database reachability",
        responses={503: {"model": ErrorEnvelope, "description": "The order database is unreachable."}},
    )
    async def healthz() -> Response:
        await store.ping()
        return Response(b'{"status":"ok","database":"ok"}', media_type="application/json")

    return api


class ConnectorApp:
    """The ASGI callable served by uvicorn. ``fast_path=False`` serves everything through FastAPI."""

    def __init__(self, settings: ConnectorSettings, *, fast_path: bool = True) -> None:
        self.settings = settings
        self.store = make_store(settings)
        self.gate = OrderGate(settings, self.store)
        self.api = _build_api(settings, self.gate, self.store)
        self.fast_path = fast_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The fast path runs in this coroutine itself: each awaited layer would cost every request
        # a coroutine, and nothing below awaits in the usual case (a loaded key table, SQLite).
        request = self._fast_request(scope) if self.fast_path else None
        if request is None:
            await self.api(scope, receive, send)
            return
        order_id, key, organization = request
        gate = self.gate
        try:
            text_key = key.decode("latin-1")
            address = _client_address(scope)
            org = _organization(organization.decode("latin-1")) if organization else "-"
            if gate.authorize_now(text_key, address, org) is None:
                await gate.authorize(text_key, address, org)
            body = self.store.body_now(order_id)
            if isinstance(body, Absent):
                body = await self.store.body(order_id)
            if body is None:
                raise OrderNotFound(order_id)
            headers = [_JSON, _NO_STORE, (b"content-length", b"%d" % len(body))]
            status = 200
        except ConnectorError as exc:
            if isinstance(exc, StoreUnavailable):
                log.warning("connector.store_unavailable")
            status, body = exc.status_code, exc.body()
            headers = [_JSON, _NO_STORE]
            headers += [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
            headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _fast_request(scope: Scope) -> tuple[int, bytes, bytes | None] | None:
        """(order id, key, organization header) of the common request, or None to hand the request
        to FastAPI untouched: ``GET /api/orders/<digits>``, no query string, an X-API-Key header."""
        if not (
            scope["type"] == "http"
            and scope["method"] == "GET"
            and not scope["query_string"]
            and scope["path"].startswith(ORDER_PATH_PREFIX)
        ):
            return None
        raw_id: str = scope["path"][len(ORDER_PATH_PREFIX) :]
        # ASCII digits only: str.isdigit() alone also accepts other scripts' digits.
        if not (0 < len(raw_id) <= _MAX_ID_DIGITS and raw_id.isascii() and raw_id.isdigit()):
            return None
        order_id = int(raw_id)
        if order_id < 1 or order_id > MAX_ORDER_ID:
            return None
        key: bytes | None = None
        organization: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"x-api-key" and key is None:
                key = value
            elif name == b"x-parley-organization" and organization is None:
                organization = value
        if not key:
            return None
        return order_id, key, organization

    async def aclose(self) -> None:
        await self.store.close()


def create_connector_app(
    settings: ConnectorSettings | None = None, *, fast_path: bool = True
) -> ConnectorApp:
    return ConnectorApp(settings or ConnectorSettings(), fast_path=fast_path)


def configure_logging(settings: ConnectorSettings) -> None:
    """The platform's JSON logs (with redaction) for a connector process; an embedding process keeps
    its own configuration."""
    if not structlog.is_configured():
        kit_logging.configure_logging(settings.log_level)


def create_app_from_env() -> ConnectorApp:
    """Uvicorn factory for multi-worker serving: each worker reads the settings from the environment."""
    settings = ConnectorSettings()
    configure_logging(settings)
    return create_connector_app(settings)
