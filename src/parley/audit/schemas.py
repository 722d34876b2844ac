from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class AuditEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    organization_id: str | None
    actor_type: str
    actor_id: str
    action: str
    resource_type: str | None
    resource_id: str | None
    method: str
    path: str
    ip: str | None
    user_agent: str | None
    request_id: str | None
    details: dict[str, Any] | None
    created_at: datetime
