"""The baseline: a bare ASGI app that returns fixed JSON bytes (the ceiling for a Python server here).

``PARLEY_BENCH_BODY`` is a file with the bytes to return, so the baseline answers the same payload as
the service it is compared with.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_BODY = Path(os.environ["PARLEY_BENCH_BODY"]).read_bytes() if "PARLEY_BENCH_BODY" in os.environ else b"{}"
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})
