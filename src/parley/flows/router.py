from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.flows import service
from parley.flows.models import Flow, FlowVersion
from parley.flows.schemas import (
    FlowCreate,
    FlowExport,
    FlowFullOut,
    FlowImport,
    FlowImportOut,
    FlowOut,
    FlowStatus,
    FlowSummary,
    FlowUpdate,
    FlowValidateIn,
    FlowValidationOut,
    FlowVersionOut,
    FlowVersionSummary,
)
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/flows", tags=["Flows"])

FlowId = Annotated[str, Path(alias="flowId", max_length=40, description="Flow id (flow_...).")]
VersionNumber = Annotated[int, Path(alias="version", ge=1, le=1_000_000, description="Version number.")]


@router.post("", summary="Create Flow", response_model=FlowOut)
async def create_flow(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[FlowCreate, ParsedBody(FlowCreate)],
) -> FlowOut:
    """Create a flow; the definition becomes its draft.

    A 422 for an invalid definition names the node and field in ``loc``, e.g.
    ``["body", "definition", "nodes", "ask_order", "next"]`` (see docs/flows.md).
    """
    flow = await service.create_flow(session, context, data)
    describe(request, "flow", flow.id)
    return service.to_out(flow)


@router.get("", summary="List Flows", response_model=Page[FlowSummary])
async def list_flows(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    status: Annotated[
        FlowStatus | None, Query(description="draft: never published; published: has versions.")
    ] = None,
    q: Annotated[str | None, Query(max_length=100, description="Text in the name or description.")] = None,
) -> Page[FlowSummary]:
    rows, cursor = await paginate(
        session, service.list_query(context.organization_id, status, q), Flow.id, page
    )
    return Page[FlowSummary](items=[service.to_summary(f) for f in rows], next_cursor=cursor)


@router.post("/validate", summary="Validate Flow Definition", response_model=FlowValidationOut)
async def validate_flow_definition(
    session: DbSession,
    context: OrgReader,
    data: Annotated[FlowValidateIn, ParsedBody(FlowValidateIn)],
) -> FlowValidationOut:
    """Check a definition without saving it: ``{valid, errors: [{node, field, message}]}``."""
    return await service.validate_raw(session, context.organization_id, data.definition)


@router.post("/import", summary="Import Flow", responses=documented(409), response_model=FlowImportOut)
async def import_flow(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[FlowImport, ParsedBody(FlowImport)],
) -> FlowImportOut:
    """Create a flow from an export document. Tools missing in this organization are created (without
    secrets: set them afterwards); tools of the same name and type are reused.

    A 422 for an invalid definition names the node and field in ``loc``, e.g.
    ``["body", "definition", "nodes", "ask_order", "next"]`` (see docs/flows.md).
    """
    result = await service.import_flow(session, context, data)
    describe(request, "flow", result.flow.id, created_tools=result.created_tools)
    return result


@router.get("/{flowId}", summary="Get Flow", response_model=FlowOut)
async def get_flow(session: DbSession, context: OrgReader, flow_id: FlowId) -> FlowOut:
    return service.to_out(await service.read_flow(session, context.organization_id, flow_id))


@router.patch("/{flowId}", summary="Update Flow", response_model=FlowOut)
async def update_flow(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    flow_id: FlowId,
    data: Annotated[FlowUpdate, ParsedBody(FlowUpdate)],
) -> FlowOut:
    """Change the name, description or draft definition. Published versions never change.

    A 422 for an invalid definition names the node and field in ``loc``, e.g.
    ``["body", "definition", "nodes", "ask_order", "next"]`` (see docs/flows.md).
    """
    flow = await service.update_flow(session, context.organization_id, flow_id, data)
    describe(request, "flow", flow.id)
    return service.to_out(flow)


@router.delete("/{flowId}", summary="Delete Flow", response_model=DeletedOut)
async def delete_flow(
    request: Request, session: DbSession, context: OrgWriter, flow_id: FlowId
) -> DeletedOut:
    """Delete a flow with all of its versions."""
    flow = await service.delete_flow(session, context.organization_id, flow_id)
    describe(request, "flow", flow.id)
    return DeletedOut(id=flow.id)


@router.get("/{flowId}/full", summary="List Flow Full", response_model=FlowFullOut)
async def get_flow_full(session: DbSession, context: OrgReader, flow_id: FlowId) -> FlowFullOut:
    """The flow resolved: draft definition, nodes and edges, the tools it uses (secrets masked), the
    knowledge documents it uses, version information and the draft's current validation report."""
    return await service.full(session, context.organization_id, flow_id)


@router.post("/{flowId}/validate", summary="Validate Flow", response_model=FlowValidationOut)
async def validate_flow(session: DbSession, context: OrgReader, flow_id: FlowId) -> FlowValidationOut:
    """Check the stored draft against the organization as it is now (a tool may have been deleted)."""
    return await service.validate_flow(session, context.organization_id, flow_id)


@router.post(
    "/{flowId}/publish", summary="Publish Flow", responses=documented(409), response_model=FlowVersionOut
)
async def publish_flow(
    request: Request, session: DbSession, context: OrgWriter, flow_id: FlowId
) -> FlowVersionOut:
    """Freeze the draft into the next numbered, immutable version. 409 when the draft is invalid or
    unchanged since the last version."""
    version = await service.publish(session, context, flow_id)
    describe(request, "flow", flow_id, version=version.version)
    return FlowVersionOut.model_validate(version)


@router.get("/{flowId}/versions", summary="List Flow Versions", response_model=Page[FlowVersionSummary])
async def list_flow_versions(
    session: DbSession, context: OrgReader, flow_id: FlowId, page: Pagination
) -> Page[FlowVersionSummary]:
    """Published versions, newest first."""
    flow = await service.get_flow(session, context.organization_id, flow_id)
    stmt = service.versions_query(context.organization_id, flow.id)
    rows, cursor = await paginate(session, stmt, FlowVersion.id, page)
    return Page[FlowVersionSummary](
        items=[FlowVersionSummary.model_validate(v) for v in rows], next_cursor=cursor
    )


@router.get("/{flowId}/versions/{version}", summary="Get Flow Version", response_model=FlowVersionOut)
async def get_flow_version(
    session: DbSession, context: OrgReader, flow_id: FlowId, version: VersionNumber
) -> FlowVersionOut:
    return FlowVersionOut.model_validate(
        await service.get_version(session, context.organization_id, flow_id, version)
    )


@router.get("/{flowId}/export", summary="Export Flow", response_model=FlowExport)
async def export_flow(session: DbSession, context: OrgReader, flow_id: FlowId) -> FlowExport:
    """The draft as a portable document: definition (tools by name) and tool definitions, no secrets."""
    return await service.export(session, context.organization_id, flow_id)
