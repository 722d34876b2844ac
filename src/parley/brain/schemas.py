from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.kit.schemas import Severity, StrictModel

SignalStatus = Literal["open", "acknowledged", "resolved"]
SignalSource = Literal["rule", "flow", "runtime"]


class SignalOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str = Field(examples=["sig_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    call_id: str | None
    flow_id: str | None
    type: str = Field(examples=["callback_requested"])
    severity: Severity
    status: SignalStatus
    source: SignalSource = Field(
        description="rule: a built-in rule; flow: a signal node; runtime: the engine."
    )
    details: dict[str, Any]
    occurred_at: datetime
    created_at: datetime
    note: str | None
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    resolved_by: str | None
    resolved_at: datetime | None


class SignalUpdate(StrictModel):
    status: Literal["acknowledged", "resolved"] = Field(
        description="open → acknowledged → resolved (open → resolved is allowed too)."
    )
    note: str | None = Field(default=None, max_length=2000, description="Why, or what was done.")
