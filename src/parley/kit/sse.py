"""Server-sent events: one encoder for an event and one streaming response, for every streamed route."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from typing import Any

from fastapi.responses import StreamingResponse

# The media type and the OpenAPI description of a streamed 200 answer.
MEDIA_TYPE = "text/event-stream"


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One event: ``event: <name>`` and its JSON ``data`` line (non-ASCII kept, other values as text)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


def sse_response(events: AsyncIterable[bytes]) -> StreamingResponse:
    """A streamed answer of already encoded events; never cached (each stream is one request's own)."""
    return StreamingResponse(events, media_type=MEDIA_TYPE, headers={"Cache-Control": "no-store"})


def openapi_stream(description: str) -> dict[str, Any]:
    """The ``200`` entry of ``responses=`` for a route that may answer as a stream."""
    return {"content": {MEDIA_TYPE: {"schema": {"type": "string"}}}, "description": description}
