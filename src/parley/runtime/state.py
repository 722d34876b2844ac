"""The state of one conversation: everything the engine needs to continue it, in any process.

It is plain JSON (``to_json``/``from_json``), stored in the session row between turns.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.calls.contracts import (
    Outcome,
    SignalRecord,
    ToolCallRecord,
    TurnMetrics,
    TurnRecord,
    UsageRecord,
)


class LlmNodeState(BaseModel):
    """The bounded conversation of the ``llm`` node the session is in."""

    node_id: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    turns: int = 0


TransferStatus = Literal["dialing", "transferred", "busy", "no-answer", "failed", "canceled", "unavailable"]


class TransferState(BaseModel):
    """The conversation's last hand-over to a person: where to, from which node, how it went."""

    to: str
    node_id: str
    status: TransferStatus
    provider: str | None = None
    requested_at: datetime
    # the failure branch: where the flow continues when the dial does not connect (None: it ends)
    next: str | None = None
    # the transcript index of the first line said after the caller came back (a new media stream
    # speaks these lines first)
    resume_index: int | None = None


class ConversationState(BaseModel):
    current_node: str | None = None
    # True while the engine waits for the caller at ``current_node`` (a collect or llm node).
    waiting: bool = False
    variables: dict[str, Any] = Field(default_factory=dict)
    retries: dict[str, int] = Field(default_factory=dict)
    # digits a collect node heard that are fewer than it needs: the caller paused mid-number
    partial_digits: dict[str, str] = Field(default_factory=dict)
    transcript: list[TurnRecord] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    signals: list[SignalRecord] = Field(default_factory=list)
    metrics: list[TurnMetrics] = Field(default_factory=list)
    usage: UsageRecord = Field(default_factory=UsageRecord)
    llm: LlmNodeState | None = None
    status: Literal["active", "ended"] = "active"
    outcome: Outcome | None = None
    end_reason: str | None = None
    transferred_to: str | None = None
    transferred_at: datetime | None = None
    transfer: TransferState | None = None

    @property
    def transferring(self) -> bool:
        """True while the provider dials the transfer target (the caller is not in the flow)."""
        return self.transfer is not None and self.transfer.status == "dialing"

    def opening_lines(self) -> list[str]:
        """What a voice connection says first: the agent's lines before the caller's first word, or,
        once the caller came back from a transfer that did not connect, the lines said since then."""
        start = 0
        if self.transfer is not None and self.transfer.resume_index is not None:
            start = self.transfer.resume_index
        tail = self.transcript[start:]
        if any(turn.speaker == "caller" for turn in tail):
            return []
        return [turn.text for turn in tail if turn.speaker == "agent"]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConversationState:
        return cls.model_validate(data)
