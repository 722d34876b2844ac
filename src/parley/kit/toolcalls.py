"""The one shape of a tool call, from the executor through the engine to the call record.

The executor answers a :class:`ToolResult` (what the tool did); the engine's tool port answers the same
fields with the tool that answered (:class:`ToolOutcome`, an extension, not a copy); the call record
keeps :meth:`ToolOutcome.recorded` of it (``parley.calls.contracts.ToolCallRecord``, whose JSON is the
API's). It lives in kit because tools, the runtime and calls all speak it and none may import another.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

# ``not_found``: the tool worked and answered that the thing asked about does not exist (the order
# connector's 404). It is an answer a flow branches on, not a failure, but not ``ok`` either.
ToolStatus = Literal["ok", "not_found", "error", "timeout"]


@dataclass
class ToolResult:
    status: ToolStatus
    latency_ms: float = 0.0
    http_status: int | None = None
    result: Any = None
    error: str | None = None
    # A tool that acts on the conversation itself (``transfer``, ``end_session``) asks the engine to
    # act, which only the runtime can: ``{"action": "transfer", "to", "message"}`` or
    # ``{"action": "end_session", "message", "reason"}``.
    action: dict[str, Any] | None = None


@dataclass(kw_only=True)
class ToolOutcome(ToolResult):
    """A tool's result together with the tool that gave it (``tool_id`` None: no such tool)."""

    tool_id: str | None
    tool_name: str

    @classmethod
    def of(cls, result: ToolResult, *, tool_id: str | None, tool_name: str) -> ToolOutcome:
        values = {f.name: getattr(result, f.name) for f in fields(ToolResult)}
        return cls(**values, tool_id=tool_id, tool_name=tool_name)

    def recorded(self) -> dict[str, Any]:
        """The fields a call record keeps: the action was taken, so it is not stored."""
        return {
            "tool_id": self.tool_id,
            "tool_name": self.tool_name,
            "status": self.status,
            "http_status": self.http_status,
            "latency_ms": self.latency_ms,
            "result": self.result,
            "error": self.error,
        }
