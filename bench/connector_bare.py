"""Baseline for the connector benchmark: a bare ASGI app returning fixed bytes (one order envelope).

The body is read once from the file named by CONNECTOR_BENCH_BODY, so the baseline sends exactly
the bytes the connector sends for a typical order.
"""

import os
from pathlib import Path
from typing import Any

BODY = Path(os.environ["CONNECTOR_BENCH_BODY"]).read_bytes()
HEADERS = [
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-store"),
    (b"content-length", str(len(BODY)).encode()),
]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
