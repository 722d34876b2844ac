from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from parley.kit.errors import InvalidFields
from parley.kit.schemas import E164Target, StrictModel
from parley.kit.templates import template_check_scope, template_problems

ToolType = Literal["http", "order_lookup", "knowledge_search", "end_session", "transfer"]
ToolName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", examples=["order_lookup"])]
SecretName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$", examples=["api_key"])]
SecretValue = Annotated[str, Field(min_length=1, max_length=4096)]
MAX_TIMEOUT_SECONDS = 30.0


def _http_url(value: str) -> str:
    if not value.lower().startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return value


def _template(value: str) -> str:
    problems = template_problems(value)
    if problems:
        raise ValueError(problems[0])
    return value


def _template_values(value: Any) -> Any:
    if isinstance(value, str):
        _template(value)
    elif isinstance(value, dict):
        for item in value.values():
            _template_values(item)
    elif isinstance(value, list):
        for item in value:
            _template_values(item)
    return value


class TokenHeader(StrictModel):
    """Where a connection's access token goes when not ``Authorization: Bearer``: ``prefix + token``."""

    model_config = ConfigDict(str_strip_whitespace=False)  # a prefix such as "Token " keeps its space

    header: str = Field(pattern=r"^[A-Za-z0-9-]{1,100}$", examples=["X-Token"])
    prefix: str = Field(default="", max_length=40, pattern=r"^[\x20-\x7e]*$", examples=["Token "])


class ConnectionAuth(StrictModel):
    """Authenticate with an integration connection's OAuth access token (refreshed before it expires)."""

    model_config = ConfigDict(serialize_by_alias=True)

    type: Literal["connection"]
    connection_id: str = Field(
        min_length=1, max_length=40, description="An integration connection of this organization."
    )
    as_: Literal["bearer"] | TokenHeader = Field(
        default="bearer",
        alias="as",
        description='"bearer" (Authorization: Bearer <token>) or {"header": "X-Token", "prefix": ""}.',
    )

    @property
    def header(self) -> str:
        return "Authorization" if self.as_ == "bearer" else self.as_.header

    def value(self, token: str) -> str:
        return f"Bearer {token}" if self.as_ == "bearer" else self.as_.prefix + token


class HttpToolConfig(StrictModel):
    """An HTTP call. Strings are templates over the call's arguments; headers and query also see
    ``secrets`` (e.g. ``"Bearer {{ secrets.token }}"``)."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str = Field(
        min_length=8, max_length=2000, examples=["https://api.example.com/orders/{{ order_id }}"]
    )
    headers: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,100}$")], Annotated[str, Field(max_length=4000)]
    ] = Field(default_factory=dict, max_length=50)
    query: dict[
        Annotated[str, Field(min_length=1, max_length=100)], Annotated[str, Field(max_length=4000)]
    ] = Field(default_factory=dict, max_length=50)
    body: Any = Field(
        default=None,
        description="Sent as JSON; string leaves are templates ('{{ name }}' alone keeps the argument's type).",
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the call's arguments.",
    )
    timeout_seconds: float = Field(default=10.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    response_mapping: dict[SecretName, Annotated[str, Field(max_length=500)]] = Field(
        default_factory=dict,
        max_length=50,
        description="Result name → JSON pointer ('/order/status') or dotted path ('order.status').",
    )
    auth: ConnectionAuth | None = Field(
        default=None,
        description="Send an integration connection's access token (see docs/tools.md, connected accounts).",
    )

    @model_validator(mode="after")
    def _one_token_header(self) -> HttpToolConfig:
        if self.auth is not None and self.auth.header.lower() in {h.lower() for h in self.headers}:
            raise ValueError(
                f"The header {self.auth.header!r} carries the connection's token; remove it from headers."
            )
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _template(_http_url(value))

    @field_validator("headers", "query")
    @classmethod
    def _templates(cls, value: dict[str, str]) -> dict[str, str]:
        return _template_values(value)  # type: ignore[no-any-return]

    @field_validator("body")
    @classmethod
    def _body(cls, value: Any) -> Any:
        return _template_values(value)

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"is not a valid JSON Schema: {exc.message}") from exc
        if value.get("type") != "object":
            raise ValueError('must describe an object ("type": "object")')
        return value


class OrderLookupConfig(StrictModel):
    """``GET {connector_url}/api/orders/{order_id}`` with the ``api_key`` secret as X-API-Key."""

    connector_url: str | None = Field(
        default=None, max_length=500, description="Default: the platform's configured connector."
    )
    timeout_seconds: float = Field(default=5.0, gt=0, le=MAX_TIMEOUT_SECONDS)

    @field_validator("connector_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _http_url(value) if value is not None else None


class KnowledgeSearchConfig(StrictModel):
    top_k: int = Field(default=3, ge=1, le=10)
    document_ids: list[Annotated[str, Field(max_length=40)]] | None = Field(default=None, max_length=100)


class EndSessionConfig(StrictModel):
    message: str = Field(default="", max_length=1000, description="What to say before hanging up.")


class TransferConfig(StrictModel):
    phone_number: E164Target
    message: str = Field(default="", max_length=1000)


CONFIG_MODELS: dict[str, type[StrictModel]] = {
    "http": HttpToolConfig,
    "order_lookup": OrderLookupConfig,
    "knowledge_search": KnowledgeSearchConfig,
    "end_session": EndSessionConfig,
    "transfer": TransferConfig,
}

REQUIRED_SECRETS: dict[str, tuple[str, ...]] = {"order_lookup": ("api_key",)}


def parse_config(
    tool_type: str, config: dict[str, Any], *, loc: tuple[str | int, ...] = ("body", "config")
) -> StrictModel:
    """Validate ``config`` for ``tool_type``; problems are 422s located under ``loc``."""
    try:
        with template_check_scope():  # the config's templates share one checking budget
            return CONFIG_MODELS[tool_type].model_validate(config)
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False):
            item = dict(error)
            item["loc"] = (*loc, *error["loc"])
            errors.append(item)
        raise InvalidFields(errors) from exc


def require_secrets(tool_type: str, names: set[str]) -> None:
    missing = [n for n in REQUIRED_SECRETS.get(tool_type, ()) if n not in names]
    if missing:
        raise InvalidFields(
            [
                {
                    "type": "missing",
                    "loc": ("body", "secrets", name),
                    "msg": f"A {tool_type} tool needs the secret {name!r}.",
                    "input": None,
                }
                for name in missing
            ]
        )


_CONFIG_DESCRIPTION = (
    "Per type: http → HttpToolConfig; order_lookup → OrderLookupConfig; knowledge_search → "
    "KnowledgeSearchConfig; end_session → EndSessionConfig; transfer → TransferConfig (see docs/tools.md)."
)


class ToolCreate(StrictModel):
    name: ToolName
    description: str | None = Field(default=None, max_length=1000)
    type: ToolType
    config: dict[str, Any] = Field(default_factory=dict, description=_CONFIG_DESCRIPTION)
    secrets: dict[SecretName, SecretValue] = Field(
        default_factory=dict,
        max_length=20,
        description="Encrypted at rest, never returned; http tools use them as {{ secrets.NAME }}.",
    )


class ToolUpdate(StrictModel):
    name: ToolName | None = None
    description: str | None = Field(default=None, max_length=1000)
    config: dict[str, Any] | None = Field(default=None, description="Replaces the whole configuration.")
    secrets: dict[SecretName, SecretValue | None] | None = Field(
        default=None, max_length=20, description="Merged: a value sets a secret, null removes it."
    )


class ToolOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    description: str | None
    type: str
    config: dict[str, Any]
    secrets: dict[str, str] = Field(description="Secret name → masked hint; the values are never shown.")
    parameters: dict[str, Any] = Field(description="JSON Schema of the arguments the tool takes.")
    created_at: datetime
    updated_at: datetime


class ToolTestIn(StrictModel):
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolTestOut(BaseModel):
    status: Literal["ok", "not_found", "error", "timeout", "dry_run"]
    http_status: int | None
    latency_ms: float
    result: Any = Field(description="Parsed JSON or text; cut to 10 kB (see truncated).")
    truncated: bool = False
    error: str | None = None
