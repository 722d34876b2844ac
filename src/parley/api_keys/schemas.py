from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parley.kit.schemas import StrictModel

Scope = Literal["read", "write", "admin"]


def _default_scopes() -> list[Scope]:
    return ["read", "write"]


class ApiKeyCreate(StrictModel):
    name: str = Field(min_length=1, max_length=120, examples=["order-sync server"])
    scopes: list[Scope] = Field(default_factory=_default_scopes, min_length=1)
    expires_in_days: int | None = Field(
        default=None, ge=1, le=3650, description="Omit for a key that never expires."
    )

    @field_validator("scopes")
    @classmethod
    def _unique(cls, scopes: list[Scope]) -> list[Scope]:
        return sorted(set(scopes))


class ApiKeyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    hint: str = Field(description="The key's last characters, to recognise it.")
    scopes: list[str]
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    created_by: str | None
    status: Literal["active", "expired", "revoked"]


class ApiKeyCreated(ApiKeyOut):
    secret: str = Field(description="The key itself. Shown only in this response; store it now.")
