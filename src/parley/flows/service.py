"""Flow rules: drafts validated on save, immutable numbered versions, the resolved view and
export/import. Never commits; the request's session does."""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy import Row, Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.flows.definition import FlowDefinition, node_targets
from parley.flows.models import Flow, FlowVersion
from parley.flows.schemas import (
    EXPORT_FORMAT,
    ExportedTool,
    FlowCreate,
    FlowEdgeOut,
    FlowExport,
    FlowFullOut,
    FlowImport,
    FlowImportOut,
    FlowNodeOut,
    FlowOut,
    FlowSummary,
    FlowUpdate,
    FlowValidationOut,
    FlowVersionInfo,
    KnowledgeDocumentRef,
    ValidationIssueOut,
)
from parley.flows.validation import Issue, OrgResources, ToolRef, validate_definition
from parley.kit.db import utcnow
from parley.kit.errors import Conflict, InvalidFields
from parley.kit.ids import new_id
from parley.kit.tenancy import get_owned, read_owned, scoped
from parley.tools import service as tools_service
from parley.tools.models import Tool
from parley.tools.schemas import parse_config

MAX_LISTED_DOCUMENTS = 200


# --- helpers ----------------------------------------------------------------------------------------


def definition_json(definition: FlowDefinition) -> dict[str, Any]:
    return definition.model_dump(mode="json", exclude_none=True)


def definition_hash(definition: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)).hexdigest()


def referenced_tools(definition: dict[str, Any]) -> set[str]:
    """Tool names/ids a stored definition refers to (works on raw JSON)."""
    found: set[str] = set()
    for node in definition.get("nodes") or []:
        if not isinstance(node, dict):
            continue
        if node.get("type") == "tool" and isinstance(node.get("tool"), str):
            found.add(node["tool"])
        if node.get("type") == "llm":
            found.update(t for t in node.get("tools") or [] if isinstance(t, str))
    return found


async def flows_using_tool(session: AsyncSession, organization_id: str, tool: Tool) -> list[str]:
    """Ids of flows whose draft refers to ``tool`` (by name or id)."""
    rows = await session.execute(
        select(Flow.id, Flow.definition).where(Flow.organization_id == organization_id)
    )
    return [
        flow_id for flow_id, definition in rows.all() if {tool.id, tool.name} & referenced_tools(definition)
    ]


tools_service.count_tool_users(flows_using_tool)


def _summary_fields(flow: Flow | Row[Any]) -> dict[str, Any]:
    return {
        "id": flow.id,
        "name": flow.name,
        "description": flow.description,
        "status": "published" if flow.latest_version is not None else "draft",
        "latest_version": flow.latest_version,
        "published_at": flow.published_at,
        "has_unpublished_changes": flow.latest_version is None or flow.definition_hash != flow.published_hash,
        "created_at": flow.created_at,
        "updated_at": flow.updated_at,
    }


def to_summary(flow: Flow) -> FlowSummary:
    return FlowSummary(**_summary_fields(flow))


def to_out(flow: Flow | Row[Any]) -> FlowOut:
    return FlowOut(**_summary_fields(flow), definition=flow.definition)


async def load_resources(session: AsyncSession, organization_id: str) -> OrgResources:
    tools: dict[str, ToolRef] = {}
    rows = await session.execute(
        select(Tool.id, Tool.name, Tool.type).where(Tool.organization_id == organization_id)
    )
    for tool_id, name, tool_type in rows.all():
        ref = ToolRef(tool_id, name, tool_type)
        tools[tool_id] = ref
        tools[name] = ref
    return OrgResources(tools=tools, document_ids=await _document_ids(session, organization_id))


async def _document_ids(session: AsyncSession, organization_id: str) -> set[str] | None:
    try:
        from parley.knowledge.models import KnowledgeDocument
    except ImportError:  # knowledge is not installed: document references are not checked
        return None
    rows = await session.scalars(
        select(KnowledgeDocument.id).where(KnowledgeDocument.organization_id == organization_id)
    )
    return set(rows.all())


def raise_if_invalid(issues: list[Issue]) -> None:
    if issues:
        raise InvalidFields(
            [
                {"type": "flow_invalid", "loc": issue.loc(), "msg": issue.message, "input": None}
                for issue in issues
            ]
        )


def _report(issues: list[Issue]) -> FlowValidationOut:
    return FlowValidationOut(
        valid=not issues,
        errors=[ValidationIssueOut(node=i.node, field=i.field, message=i.message) for i in issues],
    )


# --- CRUD -------------------------------------------------------------------------------------------


def list_query(organization_id: str, status: str | None, q: str | None) -> Select[Flow]:
    stmt = scoped(Flow, organization_id)
    if status == "draft":
        stmt = stmt.where(Flow.latest_version.is_(None))
    elif status == "published":
        stmt = stmt.where(Flow.latest_version.is_not(None))
    if q:
        pattern = f"%{q.lower()}%"
        stmt = stmt.where(
            func.lower(Flow.name).like(pattern)
            | func.lower(func.coalesce(Flow.description, "")).like(pattern)
        )
    return stmt


async def read_flow(session: AsyncSession, organization_id: str, flow_id: str) -> Row[Any]:
    """The flow's row, to answer it (read only)."""
    return await read_owned(session, Flow, flow_id, organization_id, "Flow")


async def get_flow(session: AsyncSession, organization_id: str, flow_id: str, *, lock: bool = False) -> Flow:
    if lock:
        row = await session.scalar(scoped(Flow, organization_id).where(Flow.id == flow_id).with_for_update())
        if row is not None:
            return row
    return await get_owned(session, Flow, flow_id, organization_id, "Flow")


async def create_flow(session: AsyncSession, context: OrgContext, data: FlowCreate) -> Flow:
    resources = await load_resources(session, context.organization_id)
    raise_if_invalid(await asyncio.to_thread(validate_definition, data.definition, resources))
    definition = definition_json(data.definition)
    flow = Flow(
        id=new_id("flow"),
        organization_id=context.organization_id,
        name=data.name,
        description=data.description,
        definition=definition,
        definition_hash=definition_hash(definition),
        created_by=context.actor_user_id,
    )
    session.add(flow)
    await session.flush()
    return flow


async def update_flow(session: AsyncSession, organization_id: str, flow_id: str, data: FlowUpdate) -> Flow:
    flow = await get_flow(session, organization_id, flow_id)
    changes = data.model_dump(exclude_unset=True)
    if data.definition is not None:
        resources = await load_resources(session, organization_id)
        raise_if_invalid(await asyncio.to_thread(validate_definition, data.definition, resources))
        flow.definition = definition_json(data.definition)
        flow.definition_hash = definition_hash(flow.definition)
    if data.name is not None:
        flow.name = data.name
    if "description" in changes:
        flow.description = data.description
    flow.updated_at = utcnow()
    await session.flush()
    return flow


async def delete_flow(session: AsyncSession, organization_id: str, flow_id: str) -> Flow:
    flow = await get_flow(session, organization_id, flow_id)
    for version in (await session.scalars(select(FlowVersion).where(FlowVersion.flow_id == flow.id))).all():
        await session.delete(version)
    await session.flush()
    await session.delete(flow)
    await session.flush()
    return flow


# --- validation -------------------------------------------------------------------------------------


async def check_flow(session: AsyncSession, organization_id: str, flow: Flow) -> list[Issue]:
    """Check the stored draft against the organization as it is now (tools or documents may be gone)."""
    try:
        definition = FlowDefinition.model_validate(flow.definition)
    except ValidationError as exc:
        return _structural_issues(flow.definition, exc)
    return await asyncio.to_thread(
        validate_definition, definition, await load_resources(session, organization_id)
    )


async def validate_flow(session: AsyncSession, organization_id: str, flow_id: str) -> FlowValidationOut:
    flow = await get_flow(session, organization_id, flow_id)
    return _report(await check_flow(session, organization_id, flow))


async def validate_raw(session: AsyncSession, organization_id: str, raw: dict[str, Any]) -> FlowValidationOut:
    try:
        definition = FlowDefinition.model_validate(raw)
    except ValidationError as exc:
        return _report(_structural_issues(raw, exc))
    resources = await load_resources(session, organization_id)
    # Off the event loop: validation renders every template once (within its budget).
    return _report(await asyncio.to_thread(validate_definition, definition, resources))


def _structural_issues(raw: Any, exc: ValidationError) -> list[Issue]:
    """Pydantic's errors, re-addressed by node id (``nodes.3.say.next`` → node ``ask``, field ``next``)."""
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    issues = []
    for error in exc.errors(include_url=False):
        loc = list(error["loc"])
        node: str | None = None
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int) and isinstance(nodes, list):
            item = nodes[loc[1]] if loc[1] < len(nodes) else None
            node_id = item.get("id") if isinstance(item, dict) else None
            node = node_id if isinstance(node_id, str) and node_id else f"#{loc[1]}"
            rest = loc[2:]
            if rest and isinstance(item, dict) and rest[0] == item.get("type"):
                rest = rest[1:]
            loc = rest
        field = ".".join(str(p) for p in loc) or ("type" if node else "definition")
        issues.append(Issue(node, field, error["msg"]))
    return issues


# --- versions ---------------------------------------------------------------------------------------

# Checks other domains hook in before a draft is published (the evaluation gate); each raises a
# Conflict to refuse. Hooks keep flows free of imports from those domains.
PublishCheck = Callable[[AsyncSession, OrgContext, Flow], Awaitable[None]]
publish_checks: list[PublishCheck] = []


async def publish(
    session: AsyncSession, context: OrgContext, flow_id: str, notes: str | None = None
) -> FlowVersion:
    flow = await get_flow(session, context.organization_id, flow_id, lock=True)
    issues = await check_flow(session, context.organization_id, flow)
    if issues:
        first = issues[0]
        where = f"node {first.node!r}, field {first.field!r}" if first.node else f"field {first.field!r}"
        raise Conflict(
            f"The draft is not valid and cannot be published ({len(issues)} problem(s); first: {where}: "
            f"{first.message}). See POST /api/flows/{flow.id}/validate."
        )
    for publish_check in publish_checks:  # e.g. the evaluation gate: a required suite must pass
        await publish_check(session, context, flow)
    latest = await session.scalar(
        select(FlowVersion)
        .where(FlowVersion.flow_id == flow.id)
        .order_by(FlowVersion.version.desc())
        .limit(1)
    )
    if latest is not None and latest.definition_hash == flow.definition_hash:
        raise Conflict(
            f"The draft has not changed since version {latest.version}; there is nothing to publish."
        )
    version = FlowVersion(
        id=new_id("fver"),
        organization_id=context.organization_id,
        flow_id=flow.id,
        version=(latest.version if latest else 0) + 1,
        name=flow.name,
        definition=flow.definition,
        definition_hash=flow.definition_hash,
        notes=notes,
        published_by=context.principal.id,
    )
    session.add(version)
    flow.latest_version = version.version
    flow.published_hash = version.definition_hash
    flow.published_at = utcnow()
    await session.flush()
    return version


def versions_query(organization_id: str, flow_id: str) -> Select[FlowVersion]:
    return scoped(FlowVersion, organization_id).where(FlowVersion.flow_id == flow_id)


async def get_version(session: AsyncSession, organization_id: str, flow_id: str, number: int) -> FlowVersion:
    from parley.kit.errors import NotFound

    flow = await get_flow(session, organization_id, flow_id)
    version = await session.scalar(
        versions_query(organization_id, flow.id).where(FlowVersion.version == number)
    )
    if version is None:
        raise NotFound(f"Flow {flow_id!r} has no version {number}.")
    return version


# --- the resolved view ------------------------------------------------------------------------------


async def full(session: AsyncSession, organization_id: str, flow_id: str) -> FlowFullOut:
    flow = await get_flow(session, organization_id, flow_id)
    definition = flow.definition
    raw_nodes = [n for n in definition.get("nodes") or [] if isinstance(n, dict)]
    issues = await check_flow(session, organization_id, flow)

    ids = {n.get("id") for n in raw_nodes}
    edges: list[FlowEdgeOut] = []
    try:
        parsed = FlowDefinition.model_validate(definition)
    except ValidationError:
        parsed = None
    if parsed is not None:
        for node in parsed.nodes:
            for field, target, kind in node_targets(node):
                if target in ids:
                    edges.append(
                        FlowEdgeOut(from_=node.id, to=target, kind=kind, label=_edge_label(node, field))
                    )
    start = definition.get("start_node")
    reached = _reachable(start, edges)
    nodes = [
        FlowNodeOut(
            id=str(n.get("id")),
            type=str(n.get("type")),
            label=n.get("label"),
            is_start=n.get("id") == start,
            reachable=n.get("id") in reached,
            config={k: v for k, v in n.items() if k not in ("id", "type", "label")},
        )
        for n in raw_nodes
    ]

    references = referenced_tools(definition)
    tools = list(
        (
            await session.scalars(
                scoped(Tool, organization_id).where(Tool.id.in_(references) | Tool.name.in_(references))
            )
        ).all()
    )
    known = {t.id for t in tools} | {t.name for t in tools}
    count = await session.scalar(
        select(func.count()).select_from(FlowVersion).where(FlowVersion.flow_id == flow.id)
    )
    summary = _summary_fields(flow)
    return FlowFullOut(
        id=flow.id,
        name=flow.name,
        description=flow.description,
        status=summary["status"],
        definition=definition,
        nodes=nodes,
        edges=edges,
        tools=[tools_service.to_out(t) for t in sorted(tools, key=lambda t: t.name)],
        missing_tools=sorted(references - known),
        knowledge_documents=await _documents(session, organization_id, raw_nodes),
        version=FlowVersionInfo(
            draft_updated_at=flow.updated_at,
            published_versions=int(count or 0),
            latest_version=flow.latest_version,
            latest_published_at=flow.published_at,
            has_unpublished_changes=summary["has_unpublished_changes"],
        ),
        validation=_report(issues),
    )


def _edge_label(node: Any, field: str) -> str | None:
    parts = field.split(".")
    if parts[0] == "conditions":
        return str(node.conditions[int(parts[1])].when)
    if parts[0] == "transitions":
        return str(node.transitions[int(parts[1])].name)
    if field == "default":
        return "default"
    return None


def _reachable(start: Any, edges: list[FlowEdgeOut]) -> set[str]:
    graph: dict[str, list[str]] = {}
    for edge in edges:
        graph.setdefault(edge.from_, []).append(edge.to)
    if not isinstance(start, str):
        return set()
    reached = {start}
    pending = [start]
    while pending:
        for succ in graph.get(pending.pop(), []):
            if succ not in reached:
                reached.add(succ)
                pending.append(succ)
    return reached


async def _documents(
    session: AsyncSession, organization_id: str, raw_nodes: list[dict[str, Any]]
) -> list[KnowledgeDocumentRef]:
    knowledge_nodes = [n for n in raw_nodes if n.get("type") == "knowledge"]
    if not knowledge_nodes:
        return []
    try:
        from parley.knowledge.models import KnowledgeDocument
    except ImportError:
        return []
    stmt = scoped(KnowledgeDocument, organization_id)
    if all(n.get("document_ids") for n in knowledge_nodes):
        wanted = {d for n in knowledge_nodes for d in n["document_ids"]}
        stmt = stmt.where(KnowledgeDocument.id.in_(wanted))
    # A knowledge node without a subset searches every document of the organization.
    rows = await session.scalars(stmt.order_by(KnowledgeDocument.id).limit(MAX_LISTED_DOCUMENTS))
    return [KnowledgeDocumentRef(id=d.id, title=d.title, status=str(d.status)) for d in rows.all()]


# --- export / import --------------------------------------------------------------------------------


async def export(session: AsyncSession, organization_id: str, flow_id: str) -> FlowExport:
    flow = await get_flow(session, organization_id, flow_id)
    references = referenced_tools(flow.definition)
    tools = list(
        (
            await session.scalars(
                scoped(Tool, organization_id).where(Tool.id.in_(references) | Tool.name.in_(references))
            )
        ).all()
    )
    by_id = {t.id: t.name for t in tools}
    definition = _rename_tools(flow.definition, by_id)
    return FlowExport(
        format=EXPORT_FORMAT,
        name=flow.name,
        description=flow.description,
        definition=definition,
        tools=[
            ExportedTool(
                name=t.name,
                description=t.description,
                type=t.type,
                config=t.config,
                secret_names=sorted(t.secrets or {}),
            )
            for t in sorted(tools, key=lambda t: t.name)
        ],
        exported_at=utcnow(),
    )


def _rename_tools(definition: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A copy of ``definition`` whose tool references are names (portable between organizations)."""
    copy: dict[str, Any] = orjson.loads(orjson.dumps(definition))
    for node in copy.get("nodes") or []:
        if node.get("type") == "tool" and node.get("tool") in names:
            node["tool"] = names[node["tool"]]
        if node.get("type") == "llm":
            node["tools"] = [names.get(t, t) for t in node.get("tools") or []]
    return copy


async def import_flow(session: AsyncSession, context: OrgContext, data: FlowImport) -> FlowImportOut:
    created: list[str] = []
    reused: list[str] = []
    missing: dict[str, list[str]] = {}
    seen: set[str] = set()
    for index, spec in enumerate(data.tools):
        if spec.name in seen:
            raise InvalidFields(
                [
                    {
                        "type": "value_error",
                        "loc": ("body", "tools", index, "name"),
                        "msg": f"The tool {spec.name!r} is listed twice.",
                        "input": spec.name,
                    }
                ]
            )
        seen.add(spec.name)
        existing = await session.scalar(scoped(Tool, context.organization_id).where(Tool.name == spec.name))
        if existing is not None:
            if existing.type != spec.type:
                raise Conflict(
                    f"This organization already has a tool called {spec.name!r} of type {existing.type}, "
                    f"but the import needs type {spec.type}; rename one of them first."
                )
            reused.append(spec.name)
            continue
        config = await asyncio.to_thread(
            functools.partial(parse_config, spec.type, spec.config, loc=("body", "tools", index, "config"))
        )
        # a tool that signs in with a connected account needs one of this organization's connections
        await tools_service.check_connection(
            session, context.organization_id, config, loc=("body", "tools", index, "config")
        )
        tool = Tool(
            id=new_id("tool"),
            organization_id=context.organization_id,
            name=spec.name,
            description=spec.description,
            type=spec.type,
            config=config.model_dump(mode="json"),
            secrets={},
            secret_hints={},
            created_by=context.actor_user_id,
        )
        session.add(tool)
        created.append(spec.name)
        if spec.secret_names:
            missing[spec.name] = sorted(spec.secret_names)
    await session.flush()
    flow = await create_flow(
        session, context, FlowCreate(name=data.name, description=data.description, definition=data.definition)
    )
    return FlowImportOut(
        flow=to_out(flow), created_tools=created, reused_tools=reused, missing_secrets=missing
    )
