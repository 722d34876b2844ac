from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import Request
from starlette.responses import Response

from parley.auth.dependencies import OrgWriter
from parley.kit.body import ParsedBody
from parley.kit.db import Database, DbSession, unit_of_work
from parley.kit.errors import ParleyError, documented
from parley.kit.routing import ParleyRouter
from parley.kit.sse import openapi_stream, sse, sse_response
from parley.llm import service
from parley.llm.client import StreamEvent, Usage
from parley.llm.schemas import ChatRequest, ChatResponse

router = ParleyRouter(prefix="/api/llm", tags=["LLM"])
log = structlog.get_logger("parley.llm")

STREAM_DOC = (
    "With `stream: true` the answer is `text/event-stream`: `delta` events carry text as it is generated "
    '(`{"content": "..."}`), one `done` event ends the stream with the finish reason, tool calls and '
    "usage, and an `error` event reports a failure after the stream began."
)


@router.post(
    "/chat",
    summary="Create LLM Chat",
    response_model=ChatResponse,
    responses={
        200: openapi_stream(STREAM_DOC),
        **documented(409, 502, 504),
    },
)
async def create_llm_chat(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[ChatRequest, ParsedBody(ChatRequest)],
) -> Response | ChatResponse:
    """Chat with the organization's OpenAI-compatible provider (also streaming, as server-sent events).

    409 when no provider is configured, 502 when the provider fails (with its reason), 504 when it
    does not answer in time. Token usage is recorded per call.
    """
    settings = request.app.state.settings
    if not data.stream:
        return await service.chat(session, settings, context, data)
    provider, first, events, http = await service.open_stream(session, settings, context, data)
    database: Database = request.app.state.db
    started = time.perf_counter()

    async def body() -> AsyncIterator[bytes]:
        # A client that disconnects cancels this generator, which closes the upstream request.
        last: StreamEvent | None = None
        try:
            event: StreamEvent | None = first
            while event is not None:
                if event.delta:
                    yield sse("delta", {"content": event.delta})
                last = event
                event = await anext(events, None)
            assert last is not None
            yield sse(
                "done",
                {
                    "finish_reason": last.finish_reason,
                    "model": last.model,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in last.tool_calls
                    ],
                    "usage": _usage_dict(last.usage or Usage()),
                    "latency_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
        except ParleyError as exc:
            yield sse("error", {"detail": exc.detail, "code": exc.code})
        finally:
            await events.aclose()  # type: ignore[attr-defined]
            await http.aclose()
            if last is not None and last.usage is not None:
                row = service.usage_row(
                    context, provider.key, last.model or provider.model, last.usage, "chat"
                )
                async with unit_of_work(database) as usage_session:
                    usage_session.add(row)

    return sse_response(body())


def _usage_dict(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
