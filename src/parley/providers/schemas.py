from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from parley.providers.catalog import ProviderKind


class ProviderOut(BaseModel):
    key: str = Field(examples=["openai"])
    kind: ProviderKind
    name: str
    description: str
    offline: bool = Field(description="Runs on this server; needs no credentials.")
    default: bool = Field(description="Used for its kind when the organization configures nothing else.")
    configured: bool = Field(description="Whether the organization has stored a configuration.")
    secret_fields: list[str] = Field(description="Fields that are encrypted at rest and masked in responses.")
    config_schema: dict[str, Any] = Field(description="JSON schema of the configuration (PUT body).")


class ProviderList(BaseModel):
    items: list[ProviderOut]
    next_cursor: str | None = None


class ProviderConfigBody(BaseModel):
    """The provider's configuration fields (see ``config_schema`` in GET /api/providers).

    Omitting a secret field keeps the stored secret; ``null`` clears an optional one.
    """

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"api_key": "sk-...", "model": "gpt-4o-mini"}]},
    )


class ProviderConfigOut(BaseModel):
    key: str
    kind: ProviderKind
    config: dict[str, Any] = Field(description="The configuration; secrets show only a masked hint.")
    secrets_set: list[str] = Field(description="Secret fields that have a stored value.")
    created_at: datetime
    updated_at: datetime


class ProviderTestResult(BaseModel):
    ok: bool
    latency_ms: float = Field(description="How long the check took.")
    detail: str = Field(description="What was checked and what happened; never contains a secret.")
