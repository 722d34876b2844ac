"""Tool rules: typed configuration per type, secrets encrypted and bound to their row, references
from flows kept intact (a tool a flow draft uses cannot be renamed or deleted)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from sqlalchemy import Row, Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.integrations.models import IntegrationConnection
from parley.kit.crypto import mask
from parley.kit.db import short_read, utcnow
from parley.kit.errors import Conflict, InvalidFields
from parley.kit.ids import new_id
from parley.kit.schemas import StrictModel
from parley.kit.tenancy import get_owned, read_owned, scoped
from parley.kit.toolcalls import ToolResult
from parley.tools.executor import (
    InvalidArguments,
    execute_tool,
    parameters_of,
    tool_secrets,
)
from parley.tools.models import Tool
from parley.tools.schemas import (
    HttpToolConfig,
    ToolCreate,
    ToolOut,
    ToolTestOut,
    ToolUpdate,
    parse_config,
    require_secrets,
)

MAX_TEST_RESULT_BYTES = 10 * 1024


def to_out(tool: Tool | Row[Any]) -> ToolOut:
    return ToolOut(
        id=tool.id,
        name=tool.name,
        description=tool.description,
        type=tool.type,
        config=tool.config,
        secrets=dict(tool.secret_hints or {}),
        parameters=parameters_of(tool),
        created_at=tool.created_at,
        updated_at=tool.updated_at,
    )


def list_query(organization_id: str, tool_type: str | None, q: str | None) -> Select[Tool]:
    stmt = scoped(Tool, organization_id)
    if tool_type:
        stmt = stmt.where(Tool.type == tool_type)
    if q:
        pattern = f"%{q.lower()}%"
        stmt = stmt.where(
            or_(
                func.lower(Tool.name).like(pattern),
                func.lower(func.coalesce(Tool.description, "")).like(pattern),
            )
        )
    return stmt


async def read_tool(session: AsyncSession, organization_id: str, tool_id: str) -> Row[Any]:
    """The tool's row, to answer it (read only)."""
    return await read_owned(session, Tool, tool_id, organization_id, "Tool")


async def get_tool(session: AsyncSession, organization_id: str, tool_id: str) -> Tool:
    return await get_owned(session, Tool, tool_id, organization_id, "Tool")


async def _name_taken(session: AsyncSession, organization_id: str, name: str, except_id: str | None) -> bool:
    stmt = select(Tool.id).where(Tool.organization_id == organization_id, Tool.name == name)
    if except_id:
        stmt = stmt.where(Tool.id != except_id)
    return await session.scalar(stmt) is not None


def _set_secrets(settings: Settings, tool: Tool, changes: dict[str, str | None]) -> None:
    sealer = tool_secrets(settings, tool)
    sealed = dict(tool.secrets or {})
    hints = dict(tool.secret_hints or {})
    for name, value in changes.items():
        if value is None:
            sealed.pop(name, None)
            hints.pop(name, None)
        else:
            sealed[name] = sealer.seal(name, value)
            hints[name] = mask(value)
    tool.secrets = sealed
    tool.secret_hints = hints


async def check_connection(
    session: AsyncSession,
    organization_id: str,
    config: StrictModel,
    *,
    loc: tuple[str | int, ...] = ("body", "config"),
) -> None:
    """An ``auth`` connection must be one of this organization's (another's is as unknown as none);
    otherwise a 422 at ``loc`` + ``auth.connection_id``."""
    auth = config.auth if isinstance(config, HttpToolConfig) else None
    if auth is None:
        return
    found = await session.scalar(
        select(IntegrationConnection.id).where(
            IntegrationConnection.id == auth.connection_id,
            IntegrationConnection.organization_id == organization_id,
        )
    )
    if found is None:
        raise InvalidFields(
            [
                {
                    "type": "unknown_connection",
                    "loc": (*loc, "auth", "connection_id"),
                    "msg": f"No integration connection {auth.connection_id!r} exists in this organization "
                    "(see GET /api/integrations/connections).",
                    "input": auth.connection_id,
                }
            ]
        )


async def create_tool(
    session: AsyncSession, settings: Settings, context: OrgContext, data: ToolCreate
) -> Tool:
    # Off the event loop: checking the config trial-renders its templates (within a budget).
    config = await asyncio.to_thread(parse_config, data.type, data.config)
    require_secrets(data.type, set(data.secrets))
    await check_connection(session, context.organization_id, config)
    if await _name_taken(session, context.organization_id, data.name, None):
        raise Conflict(
            f"A tool called {data.name!r} already exists in this organization; choose another name."
        )
    tool = Tool(
        id=new_id("tool"),
        organization_id=context.organization_id,
        name=data.name,
        description=data.description,
        type=data.type,
        config=config.model_dump(mode="json"),
        secrets={},
        secret_hints={},
        created_by=context.actor_user_id,
    )
    _set_secrets(settings, tool, dict(data.secrets))
    session.add(tool)
    await session.flush()
    return tool


ToolUsers = Callable[[AsyncSession, str, Tool], Awaitable[list[str]]]
_tool_users: list[ToolUsers] = []


def count_tool_users(finder: ToolUsers) -> None:
    """A package that refers to tools by name or id (flows) says which of its rows use a tool, so a
    tool in use is never renamed or deleted; tools never import the packages that use them."""
    _tool_users.append(finder)


async def flows_using(session: AsyncSession, organization_id: str, tool: Tool) -> list[str]:
    """Ids of the rows (flow drafts) that refer to ``tool`` by name or id."""
    found: list[str] = []
    for finder in _tool_users:
        found += await finder(session, organization_id, tool)
    return found


async def update_tool(
    session: AsyncSession, settings: Settings, organization_id: str, tool_id: str, data: ToolUpdate
) -> Tool:
    tool = await get_tool(session, organization_id, tool_id)
    changes = data.model_dump(exclude_unset=True)
    if data.name is not None and data.name != tool.name:
        if await _name_taken(session, organization_id, data.name, tool.id):
            raise Conflict(
                f"A tool called {data.name!r} already exists in this organization; choose another name."
            )
        users = await flows_using(session, organization_id, tool)
        if users:
            raise Conflict(
                f"The tool is used by name in flow {users[0]!r}"
                + (f" and {len(users) - 1} more" if len(users) > 1 else "")
                + "; refer to it by id there, or change those flows first."
            )
        tool.name = data.name
    if "description" in changes:
        tool.description = data.description
    if data.config is not None:
        config = await asyncio.to_thread(parse_config, tool.type, data.config)
        await check_connection(session, organization_id, config)
        tool.config = config.model_dump(mode="json")
    if data.secrets is not None:
        _set_secrets(settings, tool, dict(data.secrets))
    require_secrets(tool.type, set(tool.secrets))
    tool.updated_at = utcnow()
    await session.flush()
    return tool


async def delete_tool(session: AsyncSession, organization_id: str, tool_id: str) -> Tool:
    tool = await get_tool(session, organization_id, tool_id)
    users = await flows_using(session, organization_id, tool)
    if users:
        raise Conflict(
            f"The tool is used by flow {users[0]!r}"
            + (f" and {len(users) - 1} more" if len(users) > 1 else "")
            + "; remove it from those flows first."
        )
    await session.delete(tool)
    await session.flush()
    return tool


def _truncate(result: ToolResult) -> ToolTestOut:
    value: Any = result.result
    truncated = False
    encoded = orjson.dumps(value, default=str)
    if len(encoded) > MAX_TEST_RESULT_BYTES:
        text = value if isinstance(value, str) else encoded.decode("utf-8", "replace")
        value = text.encode()[:MAX_TEST_RESULT_BYTES].decode("utf-8", "ignore")
        truncated = True
    return ToolTestOut(
        status=result.status,
        http_status=result.http_status,
        latency_ms=result.latency_ms,
        result=value,
        truncated=truncated,
        error=result.error,
    )


async def test_tool(
    session: AsyncSession, settings: Settings, organization_id: str, tool_id: str, arguments: dict[str, Any]
) -> ToolTestOut:
    # Short reads only: no transaction or pool connection is held while the upstream answers.
    async with short_read(session) as reader:
        tool = await get_tool(reader, organization_id, tool_id)
    try:
        async with short_read(session) as reader:  # a knowledge search reads; an HTTP tool never does
            result = await execute_tool(reader, settings, tool, arguments)
    except InvalidArguments as exc:
        raise InvalidFields(
            [
                {
                    "type": "tool_arguments",
                    "loc": ("body", "arguments", *error.path),
                    "msg": error.message,
                    "input": None,
                }
                for error in exc.errors
            ]
        ) from exc
    return _truncate(result)
