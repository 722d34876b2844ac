from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from parley.integrations.catalog import TokenAuthMethod

# RFC 6749 §3.3: a scope token is printable ASCII without spaces, quotes or backslashes.
Scope = Annotated[str, StringConstraints(pattern=r"^[\x21\x23-\x5B\x5D-\x7E]{1,200}$")]
Url = Annotated[str, StringConstraints(min_length=8, max_length=1000, pattern=r"^https?://")]


class ProviderOut(BaseModel):
    key: str = Field(examples=["google"])
    name: str
    kind: Literal["preset", "custom", "generic"] = Field(
        description="preset: endpoints known; custom: this organization's own provider; generic: the "
        "template for a new custom provider (PUT /api/integrations/{any-new-key}/client)."
    )
    description: str
    authorize_url: str | None
    token_url: str | None
    revocation_url: str | None
    default_scopes: list[str]
    token_auth_method: TokenAuthMethod
    docs_url: str | None = None
    configured: bool = Field(description="The organization has stored a client for this provider.")
    connected: bool = Field(description="The organization holds tokens of this provider.")
    required_fields: list[str] = Field(description="Fields the client configuration needs.")


class ProviderList(BaseModel):
    items: list[ProviderOut]
    next_cursor: str | None = None


class ClientBody(BaseModel):
    """An OAuth2 client registered at the provider.

    Presets need only ``client_id`` and ``client_secret``; a custom provider also needs
    ``authorize_url``, ``token_url`` and its ``scopes``. Omitting ``client_secret`` (or sending back the
    masked hint) keeps the stored one.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"client_id": "1234.apps.googleusercontent.com", "client_secret": "GOCSPX-..."}]
        },
    )

    client_id: str = Field(min_length=1, max_length=500)
    client_secret: str | None = Field(default=None, min_length=1, max_length=1000)
    name: str | None = Field(default=None, min_length=1, max_length=120)
    scopes: list[Scope] | None = Field(default=None, max_length=50, description="Default: the preset's.")
    authorize_url: Url | None = Field(default=None, description="Custom providers only.")
    token_url: Url | None = Field(default=None, description="Custom providers only.")
    revocation_url: Url | None = Field(default=None, description="Custom providers only (RFC 7009).")
    token_auth_method: TokenAuthMethod | None = Field(
        default=None, description="How the client authenticates at the token endpoint."
    )
    tenant: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9.-]{1,100}$",
        description="Microsoft only: common, organizations, consumers or a directory (tenant) id.",
    )


class ClientOut(BaseModel):
    provider: str
    name: str
    client_id: str
    client_secret: str | None = Field(description="Masked hint of the stored secret.")
    authorize_url: str
    token_url: str
    revocation_url: str | None
    scopes: list[str]
    token_auth_method: TokenAuthMethod
    tenant: str | None
    redirect_uri: str = Field(description="Register this callback URL at the provider.")
    created_at: datetime
    updated_at: datetime


class ConnectBody(BaseModel):
    """Optional; an empty body (or none) connects with the client's scopes."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"return_to": "/settings"}]})

    return_to: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="Where to send the person afterwards: a path on this server, or a URL whose origin "
        "is in PARLEY_INTEGRATIONS_RETURN_TO_ALLOWLIST.",
    )
    scopes: list[Scope] | None = Field(default=None, max_length=50, description="Default: the client's.")


class ConnectOut(BaseModel):
    authorization_url: str = Field(description="Send the person's browser here.")
    state: str = Field(description="One-time value bound to you and this organization.")
    expires_at: datetime
    redirect_uri: str


class CallbackOut(BaseModel):
    status: Literal["connected"] = "connected"
    provider: str
    organization_id: str
    connection_id: str
    scopes: list[str]
    expires_at: datetime | None
    return_to: str | None = Field(description="The return_to given to connect, to continue to.")
    message: str


class ConnectionOut(BaseModel):
    id: str
    provider: str
    status: Literal["active", "refresh_failed"]
    scopes: list[str]
    token_type: str
    access_token: str = Field(description="Masked hint.")
    refresh_token: str | None = Field(description="Masked hint, when the provider gave one.")
    expires_at: datetime | None
    last_refreshed_at: datetime | None
    last_error: str | None
    connected_by: str | None
    created_at: datetime
    updated_at: datetime


class DisconnectOut(BaseModel):
    id: str
    deleted: bool = True
    revoked: bool = Field(description="Whether the provider confirmed the revocation.")
    revocation_detail: str | None = Field(description="Why the tokens were not revoked, if they were not.")
