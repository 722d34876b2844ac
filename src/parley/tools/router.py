from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut
from parley.tools import service
from parley.tools.models import Tool
from parley.tools.schemas import ToolCreate, ToolOut, ToolTestIn, ToolTestOut, ToolType, ToolUpdate

router = ParleyRouter(prefix="/api/tools", tags=["Tools"])

ToolId = Annotated[str, Path(alias="toolId", max_length=40, description="Tool id (tool_...).")]


@router.post("", summary="Create Tool", responses=documented(409), response_model=ToolOut)
async def create_tool(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[ToolCreate, ParsedBody(ToolCreate)],
) -> ToolOut:
    """Create a tool. Secrets are encrypted at rest and only ever shown as masked hints."""
    tool = await service.create_tool(session, request.app.state.settings, context, data)
    describe(request, "tool", tool.id, type=tool.type)
    return service.to_out(tool)


@router.get("", summary="List Tools", response_model=Page[ToolOut])
async def list_tools(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    type: Annotated[ToolType | None, Query(description="Only tools of this type.")] = None,
    q: Annotated[str | None, Query(max_length=100, description="Text in the name or description.")] = None,
) -> Page[ToolOut]:
    stmt = service.list_query(context.organization_id, type, q)
    rows, cursor = await paginate(session, stmt, Tool.id, page)
    return Page[ToolOut](items=[service.to_out(t) for t in rows], next_cursor=cursor)


@router.get("/{toolId}", summary="Get Tool", response_model=ToolOut)
async def get_tool(session: DbSession, context: OrgReader, tool_id: ToolId) -> ToolOut:
    return service.to_out(await service.read_tool(session, context.organization_id, tool_id))


@router.patch("/{toolId}", summary="Update Tool", responses=documented(409), response_model=ToolOut)
async def update_tool(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    tool_id: ToolId,
    data: Annotated[ToolUpdate, ParsedBody(ToolUpdate)],
) -> ToolOut:
    """Change a tool. ``config`` replaces the whole configuration; ``secrets`` are merged (null removes)."""
    tool = await service.update_tool(
        session, request.app.state.settings, context.organization_id, tool_id, data
    )
    describe(request, "tool", tool.id)
    return service.to_out(tool)


@router.delete("/{toolId}", summary="Delete Tool", responses=documented(409), response_model=DeletedOut)
async def delete_tool(
    request: Request, session: DbSession, context: OrgWriter, tool_id: ToolId
) -> DeletedOut:
    """Delete a tool that no flow draft uses (409 otherwise)."""
    tool = await service.delete_tool(session, context.organization_id, tool_id)
    describe(request, "tool", tool.id)
    return DeletedOut(id=tool.id)


@router.post("/{toolId}/test", summary="Test Tool", response_model=ToolTestOut)
async def test_tool(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    tool_id: ToolId,
    data: Annotated[ToolTestIn, ParsedBody(ToolTestIn)],
) -> ToolTestOut:
    """Run the tool once with ``arguments`` and report status, latency and the result (cut to 10 kB).

    An upstream failure is still a 200 here, with ``status`` error or timeout and the reason: this is a
    test report (``not_found``: the lookup worked and found nothing, e.g. the order connector's 404).
    Arguments that do not fit the tool's parameters are a 422. ``end_session`` and
    ``transfer`` act on live calls, so their test answers the action they ask for (``performed`` false).
    """
    describe(request, "tool", tool_id)
    return await service.test_tool(
        session, request.app.state.settings, context.organization_id, tool_id, data.arguments
    )
