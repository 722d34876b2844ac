from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, Field, field_validator

from parley.kit.schemas import StrictModel

MAX_MESSAGE_CHARS = 4000
MAX_VARIABLES_BYTES = 64 * 1024

Channel = Literal["web", "phone", "whatsapp", "test"]
VariableName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]


class SessionCreate(StrictModel):
    flow_id: str = Field(min_length=1, max_length=40, description="The flow (agent) to talk to.")
    version: int | None = Field(
        default=None, ge=1, description="A published version; default the latest. Ignored for channel test."
    )
    channel: Channel = "web"
    voiced: bool = Field(default=False, description="Whether the agent's turns are spoken (voice pipeline).")
    variables: dict[VariableName, Any] = Field(
        default_factory=dict, max_length=50, description='Start values, e.g. {"language": "en"}.'
    )
    caller: str | None = Field(default=None, max_length=40, description="The caller's number or handle.")
    callee: str | None = Field(default=None, max_length=40, description="The number or handle called.")
    draft: bool = Field(
        default=False, description="Run the flow's draft instead of a published version (channel test only)."
    )

    @field_validator("variables")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(orjson.dumps(value)) > MAX_VARIABLES_BYTES:
            raise ValueError(f"the start values may take at most {MAX_VARIABLES_BYTES // 1024} KiB as JSON")
        return value


class MessageIn(StrictModel):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="What the caller said.")


class VoiceIn(StrictModel):
    voiced: bool


class AudioTokenOut(BaseModel):
    """A short-lived token that opens this session's audio WebSocket (``?token=``)."""

    token: str
    expires_at: datetime
    audio_path: str = Field(description="The WebSocket path to open with the token.")


class AgentEventOut(BaseModel):
    type: Literal["say", "tool_call", "signal", "transfer", "end"]
    node_id: str | None = None
    text: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class TurnOut(BaseModel):
    index: int
    speaker: Literal["caller", "agent"]
    text: str
    at: datetime
    node_id: str | None = None


class SessionOut(BaseModel):
    id: str
    flow_id: str | None
    flow_version: int | None = Field(description="The published version it runs; null for a draft.")
    channel: Channel
    voiced: bool
    status: Literal["active", "ended"]
    outcome: str | None
    end_reason: str | None
    caller: str | None
    callee: str | None
    language: str | None
    current_node: str | None
    waiting: bool = Field(description="Whether the agent waits for the caller's next message.")
    variables: dict[str, Any]
    transcript: list[TurnOut]
    started_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None


class SessionTurnOut(SessionOut):
    """The session after a turn, with what the agent did in it."""

    events: list[AgentEventOut] = Field(description="This turn's agent events, in order.")
    reply: str = Field(description="This turn's spoken/written text, joined.")


class LiveSessionOut(BaseModel):
    id: str
    flow_id: str | None
    flow_version: int | None
    channel: Channel
    voiced: bool
    caller: str | None
    current_node: str | None
    turns: int
    started_at: datetime
    last_activity_at: datetime
