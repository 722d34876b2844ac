from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parley.kit.delivery import DeliveryStatus
from parley.kit.delivery import Outcome as AttemptOutcome
from parley.kit.schemas import Severity, StrictModel

ChannelType = Literal["webhook", "email", "slack"]
SmtpSecurity = Literal["none", "starttls", "ssl"]
DeliveryKind = Literal["signal", "test"]

# Printable text: names end up in mail subjects and logs, and PostgreSQL refuses NUL characters.
Label = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$")]
ChannelName = Annotated[
    str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f]+$", examples=["Ops webhook"])
]
Url = Annotated[str, Field(min_length=10, max_length=2000, pattern=r"^[^\s\x00-\x1f\x7f]+$")]
Secret = Annotated[str, Field(min_length=1, max_length=500)]
# Deliberately plain: the address is checked by the mail server; we only refuse header injection.
EmailAddress = Annotated[
    str,
    Field(
        min_length=3,
        max_length=254,
        pattern=r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$",
        examples=["ops@example.com"],
    ),
]
SignalTypePattern = Annotated[
    str,
    Field(min_length=1, max_length=60, pattern=r"^(\*|[a-z][a-z0-9_]{0,59})$", examples=["order_not_found"]),
]
HostName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.\-\[\]:]+$")]

# Which fields each channel type takes (besides name, type, enabled).
FIELDS: dict[str, frozenset[str]] = {
    "webhook": frozenset({"url", "secret"}),
    "slack": frozenset({"webhook_url"}),
    "email": frozenset(
        {"smtp_host", "smtp_port", "smtp_security", "smtp_username", "smtp_password", "from_address", "to"}
    ),
}
REQUIRED: dict[str, frozenset[str]] = {
    "webhook": frozenset({"url"}),
    "slack": frozenset({"webhook_url"}),
    "email": frozenset({"smtp_host", "from_address", "to"}),
}
SECRET_FIELDS = frozenset({"secret", "webhook_url", "smtp_password"})


def _http_url(value: str | None) -> str | None:
    if value is not None and not value.lower().startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return value


class _ChannelFields(StrictModel):
    url: Url | None = Field(default=None, description="webhook: where the signed JSON is POSTed.")
    secret: Secret | None = Field(
        default=None,
        description="webhook: HMAC-SHA256 key for the X-Parley-Signature header (stored encrypted).",
    )
    webhook_url: Url | None = Field(
        default=None,
        description="slack: the incoming-webhook URL (a secret: stored encrypted, shown masked).",
        examples=["https://hooks.slack.com/services/T000/B000/abc123"],
    )
    smtp_host: HostName | None = Field(default=None, description="email: the SMTP server.")
    smtp_port: int | None = Field(
        default=None, ge=1, le=65535, description="email: default 587, 465 for ssl."
    )
    smtp_security: SmtpSecurity | None = Field(default=None, description="email: default starttls.")
    smtp_username: (
        Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")] | None
    ) = None
    smtp_password: Secret | None = Field(default=None, description="email: stored encrypted.")
    from_address: EmailAddress | None = None
    to: list[EmailAddress] | None = Field(default=None, min_length=1, max_length=20)

    _check_url = field_validator("url", "webhook_url")(_http_url)


class ChannelCreate(_ChannelFields):
    """``{name, type, ...}`` with the fields of that type (unknown or foreign fields are refused)."""

    name: ChannelName
    type: ChannelType
    enabled: bool = True

    @model_validator(mode="after")
    def _fields_of_type(self) -> ChannelCreate:
        given = {
            k for k in FIELDS["webhook"] | FIELDS["slack"] | FIELDS["email"] if getattr(self, k) is not None
        }
        foreign = sorted(given - FIELDS[self.type])
        if foreign:
            raise ValueError(f"{', '.join(foreign)} do not apply to a {self.type} channel")
        missing = sorted(REQUIRED[self.type] - given)
        if missing:
            raise ValueError(f"a {self.type} channel needs {', '.join(missing)}")
        return self


class ChannelUpdate(_ChannelFields):
    """Fields to change; secrets left out are kept, ``secret: null`` / ``smtp_password: null`` remove them."""

    name: ChannelName | None = None
    enabled: bool | None = None


class ChannelOut(BaseModel):
    id: str = Field(examples=["nch_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    name: str
    type: ChannelType
    enabled: bool
    url: str | None = None
    secret: str | None = Field(default=None, description="Masked hint of the signing secret.")
    webhook_url: str | None = Field(default=None, description="Masked hint of the Slack webhook URL.")
    smtp_host: str | None = None
    smtp_port: int | None = None
    smtp_security: SmtpSecurity | None = None
    smtp_username: str | None = None
    smtp_password: str | None = Field(default=None, description="Masked hint.")
    from_address: str | None = None
    to: list[str] | None = None
    created_at: datetime
    updated_at: datetime


class RuleCreate(StrictModel):
    name: Label | None = None
    signal_type: SignalTypePattern = Field(description="A brain signal type, or * for every type.")
    min_severity: Severity = Field(default="info", description="info < low < medium < high < critical.")
    channel_id: Annotated[str, Field(min_length=1, max_length=40)]
    enabled: bool = True
    throttle_minutes: int | None = Field(
        default=None,
        ge=0,
        le=7 * 24 * 60,
        description="At most one notification per signal type from this rule per this many minutes.",
    )


class RuleUpdate(StrictModel):
    name: Label | None = None
    signal_type: SignalTypePattern | None = None
    min_severity: Severity | None = None
    channel_id: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    enabled: bool | None = None
    throttle_minutes: int | None = Field(default=None, ge=0, le=7 * 24 * 60)


class RuleOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str = Field(examples=["nrl_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    name: str | None
    signal_type: str
    min_severity: Severity
    channel_id: str
    enabled: bool
    throttle_minutes: int | None
    created_at: datetime
    updated_at: datetime


class NotificationTestIn(StrictModel):
    channel_id: Annotated[str, Field(min_length=1, max_length=40)] = Field(
        description="The channel to send a test message through."
    )


class AttemptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    outcome: AttemptOutcome
    status_code: int | None = Field(description="The HTTP status, or the SMTP reply code.")
    detail: str | None
    duration_ms: float
    started_at: datetime


class DeliveryOut(BaseModel):
    id: str = Field(examples=["ndl_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    kind: DeliveryKind
    status: DeliveryStatus
    delivered: bool
    channel_id: str
    channel_type: ChannelType
    channel_name: str
    rule_id: str | None
    signal_id: str | None
    signal_type: str | None
    severity: Severity | None
    attempts: int
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    attempt_log: list[AttemptOut] = Field(default_factory=list)


class TestFailedOut(BaseModel):
    """A test message the channel did not accept (502) or did not answer in time (504)."""

    detail: str
    code: str
    delivery: DeliveryOut


def channel_payload(model: _ChannelFields) -> dict[str, Any]:
    return model.model_dump(exclude_unset=True, exclude={"name", "type", "enabled"})
