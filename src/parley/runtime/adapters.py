"""The engine's ports on top of the platform: ``execute_tool``, knowledge search and the LLM client.

Every database look-up runs in a short read of its own (:func:`parley.kit.db.short_read`), never in
the turn's transaction: the engine runs with no transaction open and no pool connection held, so a
slow tool or model delays only its own conversation.
"""

from __future__ import annotations

import asyncio
from typing import Any

import jsonschema
import structlog
from sqlalchemy import bindparam, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.kit.db import short_read
from parley.kit.errors import ParleyError
from parley.kit.orgcache import cached, watch
from parley.kit.tenancy import scoped
from parley.knowledge import service as knowledge_service
from parley.llm import service as llm_service
from parley.llm.client import StreamEvent, Usage
from parley.llm.models import LLMUsage
from parley.runtime.ports import (
    DeltaSink,
    KnowledgeError,
    LlmError,
    LlmReply,
    LlmToolCall,
    ToolOutcome,
    ToolSpec,
)
from parley.tools.executor import InvalidArguments, execute_tool, parameters_of
from parley.tools.models import Tool

log = structlog.get_logger("parley.runtime")

# A tool call may not hold a conversation longer than this, whatever the tool's own timeout says.
TOOL_DEADLINE_SECONDS = 30.0


# A turn's tools by id or name, built once (building the statement cost more than running it).
_TOOLS_BY_REF = select(Tool).where(
    Tool.organization_id == bindparam("organization_id"),
    or_(Tool.id.in_(bindparam("refs", expanding=True)), Tool.name.in_(bindparam("refs", expanding=True))),
)

# An organization's tools, kept in the process (kit/orgcache.py) so that a turn does not read them:
# dropped when a change to any of its tools commits here, seen from another process within the cache's
# lifetime. An organization with more than MAX_KEPT_TOOLS tools is read per turn, as before.
_TOOLS = "runtime.tools"
watch(_TOOLS, Tool)
MAX_KEPT_TOOLS = 200
_ALL_TOOLS = (
    select(Tool).where(Tool.organization_id == bindparam("organization_id")).limit(MAX_KEPT_TOOLS + 1)
)


class KeptTools:
    """An organization's tools by id and by name (read-only: detached rows, shared between turns)."""

    def __init__(self, tools: list[Tool]) -> None:
        self.by_id = {tool.id: tool for tool in tools}
        self.by_name = {tool.name: tool for tool in tools}

    def find(self, ref: str) -> Tool | None:
        # As the statement answers: a tool whose id is the ref, else one whose name is.
        return self.by_id.get(ref) or self.by_name.get(ref)


class PlatformTools:
    """Runs the organization's tools (by name or id) through ``execute_tool``."""

    def __init__(self, session: AsyncSession, settings: Settings, organization_id: str) -> None:
        self.session = session
        self.settings = settings
        self.organization_id = organization_id
        self._cache: dict[str, Tool | None] = {}

    async def preload(self, reader: AsyncSession, refs: list[str]) -> None:
        """Look up ``refs`` at once in ``reader`` (the turn's read), so calls need no look-up of their own."""
        wanted = [ref for ref in dict.fromkeys(refs) if ref not in self._cache]
        if not wanted:
            return
        kept = await cached(reader, _TOOLS, self.organization_id, lambda: self._all_tools(reader))
        if kept is not None:
            for ref in wanted:
                self._cache[ref] = kept.find(ref)
            return
        rows = (
            await reader.scalars(_TOOLS_BY_REF, {"organization_id": self.organization_id, "refs": wanted})
        ).all()
        for ref in wanted:
            self._cache[ref] = next((t for t in rows if t.id == ref), None) or next(
                (t for t in rows if t.name == ref), None
            )

    async def _all_tools(self, reader: AsyncSession) -> KeptTools | None:
        tools = list((await reader.scalars(_ALL_TOOLS, {"organization_id": self.organization_id})).all())
        if len(tools) > MAX_KEPT_TOOLS:
            return None
        for tool in tools:
            # Detached at once: a rollback of the session that read them (it expires what it holds)
            # must not touch rows other turns read.
            reader.expunge(tool)
        return KeptTools(tools)

    async def _find(self, ref: str) -> Tool | None:
        if ref not in self._cache:
            async with short_read(self.session) as reader:
                self._cache[ref] = await reader.scalar(
                    scoped(Tool, self.organization_id).where(or_(Tool.id == ref, Tool.name == ref)).limit(1)
                )
        return self._cache[ref]

    async def call(self, ref: str, arguments: dict[str, Any]) -> ToolOutcome:
        tool = await self._find(ref)
        if tool is None:
            return ToolOutcome(
                "error",
                error=f"The tool {ref!r} does not exist in this organization.",
                tool_id=None,
                tool_name=ref,
            )
        try:
            # A tool that reads the database (knowledge search) does so in a short read of its own; an
            # HTTP tool never touches it, so no connection is held while the upstream answers.
            async with short_read(self.session) as reader:
                result = await asyncio.wait_for(
                    execute_tool(reader, self.settings, tool, arguments), TOOL_DEADLINE_SECONDS
                )
        except InvalidArguments as exc:
            return ToolOutcome(
                "error", error=f"Invalid arguments: {exc}", tool_id=tool.id, tool_name=tool.name
            )
        except TimeoutError:
            return ToolOutcome(
                "timeout", error="The tool did not answer in time.", tool_id=tool.id, tool_name=tool.name
            )
        except (ValueError, TypeError, LookupError, jsonschema.SchemaError, SQLAlchemyError) as exc:
            # A stored configuration that no longer fits (or a failing query): the call fails, the
            # conversation goes on.
            log.warning("session_tool_failed", tool_id=tool.id, error_type=type(exc).__name__)
            return ToolOutcome(
                "error",
                error=f"The tool cannot run as configured ({type(exc).__name__}).",
                tool_id=tool.id,
                tool_name=tool.name,
            )
        return ToolOutcome.of(result, tool_id=tool.id, tool_name=tool.name)

    async def describe(self, refs: list[str]) -> list[ToolSpec]:
        specs = []
        for ref in refs:
            tool = await self._find(ref)
            if tool is not None:
                specs.append(ToolSpec(ref, tool.name, tool.description or tool.name, parameters_of(tool)))
        return specs


class PlatformKnowledge:
    def __init__(self, session: AsyncSession, organization_id: str) -> None:
        self.session = session
        self.organization_id = organization_id

    async def search(self, query: str, top_k: int, document_ids: list[str] | None) -> list[dict[str, Any]]:
        try:
            async with short_read(self.session) as reader:
                hits = await knowledge_service.search(
                    reader, self.organization_id, query, top_k, document_ids
                )
        except (SQLAlchemyError, ParleyError) as exc:
            log.warning("session_knowledge_failed", error_type=type(exc).__name__)
            raise KnowledgeError("The knowledge search failed.") from exc
        return [h.model_dump() for h in hits]


class PlatformLlm:
    """The organization's OpenAI-compatible provider; its token usage becomes ``LLMUsage`` rows."""

    def __init__(self, session: AsyncSession, settings: Settings, context: OrgContext) -> None:
        self.session = session
        self.settings = settings
        self.context = context
        self._provider: llm_service.ResolvedProvider | None = None
        self.usage_rows: list[LLMUsage] = []

    async def _resolved(self) -> llm_service.ResolvedProvider:
        if self._provider is None:
            async with short_read(self.session) as reader:
                self._provider = await llm_service.resolve_provider(
                    reader, self.settings, self.context, "openai"
                )
        return self._provider

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LlmReply:
        try:
            provider = await self._resolved()
            client, http = llm_service.client_for(self.settings, provider)
            payload: dict[str, Any] = {"model": provider.model, "messages": messages}
            if tools:
                payload["tools"] = tools
            async with http:
                completion = await client.complete(payload)
        except ParleyError as exc:
            raise LlmError(exc.detail) from exc
        self.usage_rows.append(
            llm_service.usage_row(self.context, provider.key, completion.model, completion.usage, "session")
        )
        return LlmReply(
            content=completion.content,
            tool_calls=[LlmToolCall(c.id, c.name, c.arguments) for c in completion.tool_calls],
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            model=completion.model,
        )

    async def stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: DeltaSink
    ) -> LlmReply:
        """The streamed completion: text pieces go to ``on_delta`` as the provider sends them."""
        parts: list[str] = []
        final: StreamEvent | None = None
        try:
            provider = await self._resolved()
            client, http = llm_service.client_for(self.settings, provider)
            payload: dict[str, Any] = {"model": provider.model, "messages": messages}
            if tools:
                payload["tools"] = tools
            async with http:
                async for event in client.stream(payload):
                    if event.delta:
                        parts.append(event.delta)
                        await on_delta(event.delta)
                    if event.usage is not None:  # the closing event: reassembled calls and usage
                        final = event
        except ParleyError as exc:
            raise LlmError(exc.detail) from exc
        if final is None or final.finish_reason is None:
            raise LlmError("The LLM provider's stream ended before the answer was complete.")
        usage = final.usage or Usage()
        model = final.model or provider.model
        self.usage_rows.append(llm_service.usage_row(self.context, provider.key, model, usage, "session"))
        return LlmReply(
            content="".join(parts) or None,
            tool_calls=[LlmToolCall(c.id, c.name, c.arguments) for c in final.tool_calls],
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            model=model,
        )
