"""The state of one conversation: everything the engine needs to continue it, in any process.

It is plain JSON (``to_json``/``from_json``), stored in the session row between turns.
"""

from __future__ import annotations

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

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConversationState:
        return cls.model_validate(data)
