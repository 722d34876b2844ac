"""Chat with the organization's LLM provider, and record the tokens each call used."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.kit.db import short_read
from parley.kit.errors import ParleyError
from parley.kit.ids import new_id
from parley.kit.outbound import guarded_client, outbound_policy
from parley.llm.client import Completion, OpenAICompatibleClient, StreamEvent, ToolCall, Usage
from parley.llm.models import LLMUsage
from parley.llm.schemas import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    FunctionCall,
    ToolCallOut,
    UsageOut,
)
from parley.providers.catalog import OpenAIConfig
from parley.providers.service import find_config, get_spec, load_config


class ProviderNotConfigured(ParleyError):
    status_code = 409
    code = "provider_not_configured"


@dataclass
class ResolvedProvider:
    key: str
    base_url: str
    api_key: str
    model: str


async def resolve_provider(
    session: AsyncSession, settings: Settings, context: OrgContext, key: str
) -> ResolvedProvider:
    row = await find_config(session, context, key)
    if row is None:
        raise ProviderNotConfigured(
            f"No LLM provider is configured for this organization: PUT /api/providers/{key}/config "
            "with api_key, base_url and model first."
        )
    config = load_config(settings, get_spec(key), row)
    assert isinstance(config, OpenAIConfig)
    return ResolvedProvider(key, config.base_url, config.api_key.get_secret_value(), config.model)


def _payload(data: ChatRequest, model: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "messages": [m.model_dump(exclude_none=True) for m in data.messages],
    }
    if data.temperature is not None:
        payload["temperature"] = data.temperature
    if data.max_tokens is not None:
        payload["max_tokens"] = data.max_tokens
    if data.tools:
        payload["tools"] = [t.model_dump(exclude_none=True) for t in data.tools]
    return payload


def client_for(settings: Settings, provider: ResolvedProvider) -> tuple[OpenAICompatibleClient, Any]:
    http = guarded_client(outbound_policy(settings), timeout=settings.llm_timeout)
    client = OpenAICompatibleClient(
        http, base_url=provider.base_url, api_key=provider.api_key, timeout=settings.llm_timeout
    )
    return client, http


def usage_row(context: OrgContext, provider: str, model: str, usage: Usage, source: str) -> LLMUsage:
    return LLMUsage(
        id=new_id("llmu"),
        organization_id=context.organization_id,
        provider=provider,
        model=model[:120],
        source=source,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        actor_id=context.principal.id,
    )


def _tool_calls(calls: list[ToolCall]) -> list[ToolCallOut]:
    return [ToolCallOut(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments)) for c in calls]


def to_response(provider: str, completion: Completion, started: float) -> ChatResponse:
    return ChatResponse(
        id=completion.id,
        provider=provider,
        model=completion.model,
        message=AssistantMessage(content=completion.content, tool_calls=_tool_calls(completion.tool_calls)),
        finish_reason=completion.finish_reason,
        usage=UsageOut(
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            total_tokens=completion.usage.total_tokens,
        ),
        latency_ms=round((time.perf_counter() - started) * 1000, 1),
    )


async def chat(
    session: AsyncSession, settings: Settings, context: OrgContext, data: ChatRequest
) -> ChatResponse:
    async with short_read(session) as reader:  # no transaction or connection waits on the model
        provider = await resolve_provider(reader, settings, context, data.provider)
    client, http = client_for(settings, provider)
    started = time.perf_counter()
    async with http:
        completion = await client.complete(_payload(data, data.model or provider.model))
    session.add(usage_row(context, provider.key, completion.model, completion.usage, "chat"))
    return to_response(provider.key, completion, started)


async def open_stream(
    session: AsyncSession, settings: Settings, context: OrgContext, data: ChatRequest
) -> tuple[ResolvedProvider, StreamEvent, AsyncIterator[StreamEvent], Any]:
    """Start a streamed chat and wait for its first event, so upstream failures still get a status code."""
    async with short_read(session) as reader:  # no transaction or connection waits on the model
        provider = await resolve_provider(reader, settings, context, data.provider)
    client, http = client_for(settings, provider)
    events = client.stream(_payload(data, data.model or provider.model))
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        await http.aclose()
        raise
    return provider, first, events, http
