from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class AdminOrganizationOut(BaseModel):
    id: str
    name: str
    slug: str
    member_count: int
    created_at: datetime
