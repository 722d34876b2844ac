"""What other packages exchange with ``calls``: data shapes only, no behaviour, nothing above kit imported.

The runtime (``parley.sessions``) fills a :class:`CallRecordIn` and calls
``parley.calls.service.store_call(session, record)`` inside the transaction that ends the session;
the call record, its transcript, tool calls, metrics, usage and brain signals are written with it.
The brain judges the record as a :class:`parley.brain.contracts.FinishedConversation`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.kit.schemas import Severity

Channel = Literal["web", "phone", "whatsapp", "test"]
Direction = Literal["inbound", "outbound"]
Outcome = Literal["completed", "transferred", "abandoned", "failed"]


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


class VoiceTurnMetrics(BaseModel):
    """What a caller experienced in one voiced turn (milliseconds): the one shape of the voice
    pipeline's ``metrics`` event, the call record's voice fields and the Prometheus turn stages.

    ``hangover_ms`` the caller's last voiced frame → the end of the turn (the endpointing wait);
    ``stt_final_ms`` end of turn → final transcript; ``stt_engine_ms`` time inside the STT engine for
    the utterance; ``llm_first_token_ms`` when the turn used an LLM; ``tts_first_byte_ms`` synthesis
    start → first audio; ``voice_to_voice_ms`` the caller's last voiced frame → first agent audio out
    (what the caller waited); ``interrupted`` the caller barged in on the answer."""

    stt_final_ms: float | None = None
    stt_engine_ms: float | None = None
    llm_first_token_ms: float | None = None
    tts_first_byte_ms: float | None = None
    voice_to_voice_ms: float | None = None
    hangover_ms: float | None = None
    interrupted: bool | None = None


# The voice fields a call record's turn entry takes from the pipeline.
VOICE_FIELDS = tuple(VoiceTurnMetrics.model_fields)


class TurnMetrics(VoiceTurnMetrics):
    """Latency of one agent turn: the runtime's figures, and the voice ones (None for text sessions)."""

    turn_index: int
    engine_ms: float
    tool_ms: float | None = None
    llm_total_ms: float | None = None


class UsageRecord(BaseModel):
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    # Speech is measured by the voice pipeline (every engine) and added when the voice call ends;
    # None: the call had no speech (a text session), not "nothing was spoken".
    tts_characters: int | None = Field(
        default=None, description="Characters sent to speech synthesis; null when the call had no voice."
    )
    stt_seconds: float | None = Field(
        default=None, description="Seconds of caller audio sent to speech recognition; null without voice."
    )


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
    # a voice transport spoke the session: its recording, voice metrics and speech usage are attached
    # after the record is written (``attach_voice``), and ``call.ended`` waits for them
    voice_connected: bool = False
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
