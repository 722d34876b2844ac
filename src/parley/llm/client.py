"""A client for any OpenAI-compatible chat-completions endpoint (OpenAI, Azure, Groq, vLLM, Ollama...).

It speaks the wire protocol directly over the SSRF-guarded HTTP client: one JSON response, or a stream
of server-sent ``chat.completion.chunk`` events that is reassembled into text deltas, tool-call deltas
and a final usage record. Upstream failures become typed errors with a reason safe to show.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from parley.kit.errors import UpstreamError, UpstreamTimeout
from parley.kit.outbound import explain

MAX_ERROR_TEXT = 300


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Completion:
    id: str
    model: str
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage


@dataclass
class StreamEvent:
    """One step of a streamed answer: a text delta, finished tool calls, or the end with usage."""

    delta: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None


def _upstream_reason(response: httpx.Response, body: bytes) -> str:
    try:
        data = json.loads(body)
        message = (
            data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else data.get("error")
        )
    except (ValueError, AttributeError):
        message = None
    text = str(message or body.decode("utf-8", "replace") or response.reason_phrase)[:MAX_ERROR_TEXT]
    return f"The LLM provider answered {response.status_code}: {text}"


def _usage(data: Any) -> Usage | None:
    if not isinstance(data, dict):
        return None
    return Usage(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


class OpenAICompatibleClient:
    def __init__(
        self, http: httpx.AsyncClient, *, base_url: str, api_key: str, timeout: float = 60.0
    ) -> None:
        self.http = http
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self.timeout = timeout

    async def complete(self, payload: dict[str, Any]) -> Completion:
        try:
            response = await self.http.post(
                self.url, json={**payload, "stream": False}, headers=self.headers, timeout=self.timeout
            )
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout("The LLM provider did not answer in time.") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"The LLM provider cannot be reached: {explain(exc)}") from exc
        if response.status_code >= 400:
            raise UpstreamError(_upstream_reason(response, response.content))
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
            calls = [
                ToolCall(c.get("id", ""), c["function"]["name"], c["function"].get("arguments") or "{}")
                for c in message.get("tool_calls") or []
            ]
            return Completion(
                id=str(data.get("id", "")),
                model=str(data.get("model", payload.get("model", ""))),
                content=message.get("content"),
                tool_calls=calls,
                finish_reason=choice.get("finish_reason"),
                usage=_usage(data.get("usage")) or Usage(),
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError("The LLM provider's answer is not a valid chat completion.") from exc

    async def stream(self, payload: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        try:
            async with self.http.stream(
                "POST",
                self.url,
                json=body,
                headers={**self.headers, "Accept": "text/event-stream"},
                timeout=self.timeout,
            ) as response:
                if response.status_code >= 400:
                    raise UpstreamError(_upstream_reason(response, await response.aread()))
                async for event in self._events(response):
                    yield event
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout("The LLM provider did not answer in time.") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"The LLM provider cannot be reached: {explain(exc)}") from exc

    async def _events(self, response: httpx.Response) -> AsyncIterator[StreamEvent]:
        pending: dict[int, ToolCall] = {}
        finish_reason: str | None = None
        usage: Usage | None = None
        model: str | None = None
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError as exc:
                raise UpstreamError("The LLM provider sent a malformed stream event.") from exc
            model = chunk.get("model") or model
            usage = _usage(chunk.get("usage")) or usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                for call in delta.get("tool_calls") or []:
                    index = int(call.get("index", 0))
                    function = call.get("function") or {}
                    current = pending.setdefault(index, ToolCall(call.get("id") or "", "", ""))
                    current.id = call.get("id") or current.id
                    current.name += function.get("name") or ""
                    current.arguments += function.get("arguments") or ""
                if delta.get("content"):
                    yield StreamEvent(delta=delta["content"], model=model)
                finish_reason = choice.get("finish_reason") or finish_reason
        yield StreamEvent(
            tool_calls=[pending[i] for i in sorted(pending)],
            finish_reason=finish_reason,
            usage=usage or Usage(),
            model=model,
        )
