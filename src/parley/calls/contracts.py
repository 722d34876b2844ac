"""What other packages exchange with ``calls``: data shapes only, no behaviour, nothing of parley imported.

The runtime (``parley.sessions``) fills a :class:`CallRecordIn` and calls
``parley.calls.service.record_call(session, record)`` inside the transaction that ends the session;
the call record, its transcript, tool calls, metrics, usage and brain signals are written with it.
The brain judges the record and reads a stored call back only through :class:`SignalledCalls`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession

Channel = Literal["web", "phone", "whatsapp", "test"]
Direction = Literal["inbound", "outbound"]
Outcome = Literal["completed", "transferred", "abandoned", "failed"]
# The same scale as a flow's signal node (parley.flows.definition.SignalNode).
Severity = Literal["info", "low", "medium", "high", "critical"]


class TurnRecord(BaseModel):
    """One utterance, by the caller or the agent, in order."""

    index: int
    speaker: Literal["caller", "agent"]
    text: str
    at: datetime
    node_id: str | None = None
    # Agent turns: milliseconds the engine took for this turn (excluding tool and LLM waits when
    # given separately below).
    engine_ms: float | None = None


class ToolCallRecord(BaseModel):
    tool_id: str | None
    tool_name: str
    node_id: str | None = None
    arguments: dict[str, Any]
    status: Literal["ok", "not_found", "error", "timeout", "dry_run"]
    http_status: int | None = None
    latency_ms: float
    result: Any = None
    error: str | None = None
    at: datetime


class TurnMetrics(BaseModel):
    """Latency of one agent turn; voice fields stay None for text sessions."""

    turn_index: int
    engine_ms: float
    tool_ms: float | None = None
    llm_first_token_ms: float | None = None
    llm_total_ms: float | None = None
    # Voiced sessions (parley.voice): end of the caller's speech → final transcript, time spent inside
    # the STT engine for the utterance, synthesis start → first audio, end of speech → first agent
    # audio out, and whether the caller interrupted the answer.
    stt_final_ms: float | None = None
    stt_engine_ms: float | None = None
    tts_first_byte_ms: float | None = None
    voice_to_voice_ms: float | None = None
    interrupted: bool | None = None


class UsageRecord(BaseModel):
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    tts_characters: int = 0
    stt_seconds: float = 0.0


class SignalRecord(BaseModel):
    """A brain signal raised during the conversation (a flow's ``signal`` node or the runtime)."""

    type: str = Field(max_length=60)
    severity: Severity = "info"
    details: dict[str, Any] = Field(default_factory=dict)
    at: datetime
    source: Literal["flow", "runtime"] = "flow"


class CallRecordIn(BaseModel):
    organization_id: str
    session_id: str
    flow_id: str | None
    flow_version: int | None
    channel: Channel
    direction: Direction = "inbound"
    caller: str | None = None
    callee: str | None = None
    language: str | None = None
    started_at: datetime
    ended_at: datetime
    outcome: Outcome
    end_reason: str | None = None
    transcript: list[TurnRecord] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    turn_metrics: list[TurnMetrics] = Field(default_factory=list)
    usage: UsageRecord = Field(default_factory=UsageRecord)
    signals: list[SignalRecord] = Field(default_factory=list)
    variables: dict[str, Any] = Field(default_factory=dict)
    recording_filename: str | None = None
    transferred_to: str | None = None
    # when the transfer connected, and how the conversation's last transfer went (transferred, busy,
    # no-answer, failed, canceled, unavailable; dialing when the session ended while it dialled)
    transferred_at: datetime | None = None
    transfer_status: str | None = None


@dataclass(frozen=True)
class CallFacts:
    """What the brain's background jobs read of a stored call."""

    id: str
    organization_id: str
    flow_id: str | None
    ended_at: datetime
    transcript: list[dict[str, Any]]


class SignalledCalls(Protocol):
    """The calls a background job of the brain may read and mark as signalled (calls implements it)."""

    async def facts(self, session: AsyncSession, call_id: str) -> CallFacts | None: ...

    async def note_signal(self, session: AsyncSession, call_id: str, signal_type: str) -> None: ...
