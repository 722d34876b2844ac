from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.calls.contracts import (
    Channel,
    Direction,
    Outcome,
    ToolCallRecord,
    TurnMetrics,
    TurnRecord,
    UsageRecord,
)
from parley.kit.schemas import E164, StrictModel

AnalysisStatus = Literal["pending", "done", "failed"]
AnalysisMethod = Literal["llm", "variables"]


class CallSummaryOut(BaseModel):
    """One call in a list: who, when, how long, how it ended and what it signalled."""

    model_config = ConfigDict(from_attributes=True)

    id: str = Field(examples=["call_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    flow_id: str | None
    flow_version: int | None
    channel: Channel
    direction: Direction
    caller: str | None
    started_at: datetime
    ended_at: datetime
    duration_seconds: float
    outcome: Outcome
    signal_types: list[str] = Field(description="Types of the brain signals this call raised.")
    turn_count: int
    mean_voice_latency_ms: float | None = Field(
        description="Mean voice-to-voice latency; null for text calls."
    )
    recording_filename: str | None
    analysis_status: AnalysisStatus | None = Field(
        default=None,
        description="Post-call analysis: pending, done or failed; null when the flow declares none.",
    )
    summary: str | None = Field(default=None, description="The post-call summary (docs/calls.md).")
    extracted: dict[str, Any] | None = Field(
        default=None, description="The fields the flow's analysis block declares, as extracted."
    )


class CallSignalOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    type: str
    severity: str
    status: str


class CallOut(CallSummaryOut):
    """The full call record."""

    session_id: str
    callee: str | None
    language: str | None
    end_reason: str | None
    transferred_to: str | None
    transferred_at: datetime | None = Field(
        default=None, description="When the call was handed over to transferred_to."
    )
    transfer_status: str | None = Field(
        default=None,
        description="How the call's last transfer went: transferred, busy, no-answer, failed, canceled "
        "or unavailable (no phone line); null when it had none.",
    )
    transcript: list[TurnRecord]
    tool_calls: list[ToolCallRecord]
    turn_metrics: list[TurnMetrics]
    usage: UsageRecord
    variables: dict[str, Any]
    signals: list[CallSignalOut]
    recording_url: str | None = Field(description="Where to download the recording, when there is one.")
    created_at: datetime
    analysis_method: AnalysisMethod | None = Field(
        default=None,
        description="How the analysis was made: llm (the organization's model) or variables "
        "(deterministically from the flow's variables and the record).",
    )
    analyzed_at: datetime | None = Field(default=None, description="When the analysis was stored.")


class OutboundCallIn(StrictModel):
    flow_id: Annotated[str, Field(min_length=1, max_length=40)] = Field(
        description="The flow that talks to the person called."
    )
    to: E164 = Field(description="The number to call, E.164.")
    from_number: E164 = Field(description="One of the organization's numbers, E.164.")


class OutboundCallOut(BaseModel):
    session_id: str
    provider: str
    provider_call_id: str | None
    to: str
    from_number: str
    status: str
