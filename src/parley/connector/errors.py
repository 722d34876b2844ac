"""Typed errors of the order operation and the one place their envelope bytes are made.

Both the fast path and the FastAPI route answer errors through :func:`envelope_error`, so a client
sees byte-identical bodies whichever path served it.
"""

from __future__ import annotations

from typing import ClassVar

import orjson


class ConnectorError(Exception):
    """An error answered with the envelope ``{"success": false, "order": null, "message": ...}``."""

    status_code: ClassVar[int] = 400

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def body(self) -> bytes:
        return envelope_error(self.message)


class KeyInQueryString(ConnectorError):
    status_code = 400


class MissingKey(ConnectorError):
    status_code = 401

    def __init__(self) -> None:
        super().__init__(
            "Missing API key: send it in the X-API-Key header.", headers={"WWW-Authenticate": "X-API-Key"}
        )


class InvalidKey(ConnectorError):
    status_code = 401

    def __init__(self) -> None:
        super().__init__("Invalid or revoked API key.", headers={"WWW-Authenticate": "X-API-Key"})


class OrderNotFound(ConnectorError):
    status_code = 404

    def __init__(self, order_id: int) -> None:
        super().__init__(f"Order {order_id} was not found.")


class RateLimited(ConnectorError):
    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, retry_after))})


class StoreUnavailable(ConnectorError):
    status_code = 503

    def __init__(self) -> None:
        super().__init__("The order store is temporarily unavailable; try again shortly.")


class ConnectorUsageError(Exception):
    """A CLI-level problem (bad file, unknown key name...) reported as one clear sentence."""


def envelope_error(message: str) -> bytes:
    return orjson.dumps({"success": False, "order": None, "message": message})


def envelope_found(order_id: int, payload: bytes) -> bytes:
    # The payload is the order's JSON serialized at import time: splice it in, never re-encode it.
    return b'{"success":true,"order":' + payload + b',"message":"Order %d found."}' % order_id
