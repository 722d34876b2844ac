"""What the engine needs from the outside world, as small interfaces (ports).

The engine never touches the database or the network itself: tools, knowledge search and the LLM are
handed in. :mod:`parley.runtime.adapters` implements them on top of ``execute_tool``, knowledge search
and the OpenAI-compatible client; tests and the benchmark may hand in their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from parley.kit.toolcalls import ToolOutcome as ToolOutcome  # the port answers the one tool-call shape


@dataclass
class ToolSpec:
    """A tool as offered to an LLM: a function name, a description and JSON-Schema parameters."""

    ref: str
    name: str
    description: str
    parameters: dict[str, Any]


class ToolPort(Protocol):
    async def call(self, ref: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run the tool named (or with the id) ``ref``; failures are outcomes, never exceptions."""
        ...

    async def describe(self, refs: list[str]) -> list[ToolSpec]:
        """The tools among ``refs`` that exist, as function specs for an LLM."""
        ...


class KnowledgeError(Exception):
    """The knowledge search failed; the message is safe to show."""


class KnowledgePort(Protocol):
    async def search(self, query: str, top_k: int, document_ids: list[str] | None) -> list[dict[str, Any]]:
        """Hits as ``{"document_id", "document_title", "text", "score"}``, best first; raise
        :class:`KnowledgeError` when the search fails."""
        ...


@dataclass
class LlmToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class LlmReply:
    content: str | None
    tool_calls: list[LlmToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""


class LlmError(Exception):
    """The LLM could not answer (not configured, upstream error, timeout); the message is safe."""


class LlmPort(Protocol):
    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LlmReply:
        """One chat completion; raise :class:`LlmError` when it fails."""
        ...


# Receives each piece of the model's text as it is generated.
DeltaSink = Callable[[str], Awaitable[None]]


@runtime_checkable
class StreamingLlmPort(LlmPort, Protocol):
    async def stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> LlmReply:
        """One streamed chat completion: text pieces go to ``on_delta`` as they arrive, function calls
        are reassembled; answers the whole reply. Raise :class:`LlmError` when it fails (also after
        some text was already handed out)."""
        ...


@dataclass
class HandOver:
    """What the line did with a transfer: ``dialing`` (the provider dials; how it ends is reported
    later), ``transferred`` (done), ``unavailable`` (no phone line to transfer: a web or text
    conversation) or ``failed`` (the provider refused or could not be reached; ``reason`` is safe)."""

    status: Literal["dialing", "transferred", "unavailable", "failed"]
    provider: str | None = None
    reason: str | None = None


class CallControlPort(Protocol):
    async def transfer(self, target: str, message: str, language: str) -> HandOver:
        """Move the live call to ``target`` (E.164); ``message`` is what the caller hears first.
        Failures are answers (``failed``/``unavailable``), never exceptions."""
        ...

    async def hang_up(self) -> None:
        """The flow ended the conversation: end the live call where the voice stream does not do it
        by itself. Never raises (a failure is logged)."""
        ...
