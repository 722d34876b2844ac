from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.flows.definition import FlowDefinition
from parley.kit.schemas import StrictModel
from parley.tools.schemas import ToolName, ToolOut, ToolType

EXPORT_FORMAT: Literal["parley.flow/v1"] = "parley.flow/v1"

FlowStatus = Literal["draft", "published"]


class FlowCreate(StrictModel):
    name: str = Field(min_length=1, max_length=200, examples=["Auftragsstatus"])
    description: str | None = Field(default=None, max_length=2000)
    definition: FlowDefinition


class FlowUpdate(StrictModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    definition: FlowDefinition | None = Field(default=None, description="Replaces the draft.")


class FlowSummary(BaseModel):
    id: str
    name: str
    description: str | None
    status: FlowStatus = Field(description="published once a version was published, draft before.")
    latest_version: int | None
    published_at: datetime | None
    has_unpublished_changes: bool
    created_at: datetime
    updated_at: datetime


class FlowOut(FlowSummary):
    definition: dict[str, Any] = Field(description="The draft definition (see docs/flows.md).")


class ValidationIssueOut(BaseModel):
    node: str | None = Field(description="The node the problem is about; null for flow-level fields.")
    field: str = Field(description="Dotted path inside the node (or the definition), e.g. conditions.0.when.")
    message: str


class FlowValidationOut(BaseModel):
    valid: bool
    errors: list[ValidationIssueOut]


class FlowValidateIn(StrictModel):
    definition: dict[str, Any] = Field(description="A definition to check without saving it.")


class FlowVersionSummary(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    flow_id: str
    version: int
    name: str
    definition_hash: str
    notes: str | None
    published_by: str | None
    created_at: datetime


class FlowVersionOut(FlowVersionSummary):
    definition: dict[str, Any]


class FlowNodeOut(BaseModel):
    id: str
    type: str
    label: str | None
    is_start: bool
    reachable: bool
    config: dict[str, Any] = Field(description="The node's other fields, as in the definition.")


class FlowEdgeOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    from_: str = Field(alias="from")
    to: str
    kind: Literal["next", "condition", "on_error", "on_failure", "transition"]
    label: str | None = Field(default=None, description="The condition, transition name or field.")


class KnowledgeDocumentRef(BaseModel):
    id: str
    title: str
    status: str


class FlowVersionInfo(BaseModel):
    draft_updated_at: datetime
    published_versions: int
    latest_version: int | None
    latest_published_at: datetime | None
    has_unpublished_changes: bool


class FlowFullOut(BaseModel):
    id: str
    name: str
    description: str | None
    status: FlowStatus
    definition: dict[str, Any]
    nodes: list[FlowNodeOut]
    edges: list[FlowEdgeOut]
    tools: list[ToolOut] = Field(description="The tools the draft uses; secrets masked.")
    missing_tools: list[str] = Field(description="Tool references that match no tool of the organization.")
    knowledge_documents: list[KnowledgeDocumentRef]
    version: FlowVersionInfo
    validation: FlowValidationOut


class ExportedTool(StrictModel):
    name: ToolName
    description: str | None = Field(default=None, max_length=1000)
    type: ToolType
    config: dict[str, Any] = Field(default_factory=dict)
    secret_names: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Secrets the tool had; their values are not exported.",
    )


class FlowExport(BaseModel):
    format: Literal["parley.flow/v1"] = EXPORT_FORMAT
    name: str
    description: str | None
    definition: dict[str, Any] = Field(description="Tools are referred to by name.")
    tools: list[ExportedTool]
    exported_at: datetime


class FlowImport(StrictModel):
    format: Literal["parley.flow/v1"] = EXPORT_FORMAT
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    definition: FlowDefinition
    tools: list[ExportedTool] = Field(default_factory=list, max_length=50)
    exported_at: datetime | None = None


class FlowImportOut(BaseModel):
    flow: FlowOut
    created_tools: list[str] = Field(description="Names of tools created by the import.")
    reused_tools: list[str] = Field(description="Names of existing tools of the same name and type, reused.")
    missing_secrets: dict[str, list[str]] = Field(
        description="Tool name → secrets to set (PATCH /api/tools/{toolId}) before the flow can call it."
    )
