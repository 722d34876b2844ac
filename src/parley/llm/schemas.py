from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.kit.schemas import StrictModel


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = Field(default=None, max_length=200_000)
    name: str | None = Field(default=None, max_length=64)
    tool_call_id: str | None = Field(
        default=None, max_length=200, description="For role tool: the call it answers."
    )
    tool_calls: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=64,
        description="For role assistant: the calls it made, as the provider sent them.",
    )


class FunctionSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=2000)
    parameters: dict[str, Any] = Field(default_factory=dict, description="JSON Schema of the arguments.")


class ToolSpec(StrictModel):
    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatRequest(StrictModel):
    messages: list[ChatMessage] = Field(min_length=1, max_length=500)
    model: str | None = Field(
        default=None, min_length=1, max_length=120, description="Default: the provider's model."
    )
    provider: Literal["openai"] = Field(
        default="openai", description="The organization's OpenAI-compatible provider configuration."
    )
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=32_768)
    tools: list[ToolSpec] | None = Field(default=None, max_length=128)
    stream: bool = Field(default=False, description="Answer as server-sent events (text/event-stream).")


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="JSON text, as the model produced it.")


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] = []


class UsageOut(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatResponse(BaseModel):
    id: str
    provider: str
    model: str
    message: AssistantMessage
    finish_reason: str | None
    usage: UsageOut
    latency_ms: float
