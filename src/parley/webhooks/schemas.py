from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parley.kit.delivery import DeliveryStatus
from parley.kit.delivery import Outcome as AttemptOutcome
from parley.kit.schemas import StrictModel

EventType = Literal[
    "call.started", "call.ended", "call.analyzed", "signal.raised", "campaign.contact.completed"
]
EVENT_TYPES: tuple[str, ...] = (
    "call.started",
    "call.ended",
    "call.analyzed",
    "signal.raised",
    "campaign.contact.completed",
)
DeliveryKind = Literal["event", "test"]

Url = Annotated[
    str,
    Field(
        min_length=10,
        max_length=2000,
        pattern=r"^[^\s\x00-\x1f\x7f]+$",
        examples=["https://crm.example.com/parley/events"],
    ),
]
Secret = Annotated[
    str,
    Field(
        min_length=16,
        max_length=200,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="HMAC-SHA256 key for the X-Parley-Signature header (at least 16 characters; stored "
        "encrypted, shown masked).",
    ),
]
Description = Annotated[str, Field(max_length=500, pattern=r"^[^\x00\x7f]*$")]
EventTypes = Annotated[list[EventType], Field(min_length=1, max_length=len(EVENT_TYPES))]


def _http_url(value: str | None) -> str | None:
    if value is not None and not value.lower().startswith(("http://", "https://")):
        raise ValueError("must start with http:// or https://")
    return value


def _distinct(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(dict.fromkeys(value))


class SubscriptionCreate(StrictModel):
    url: Url = Field(description="Where the signed JSON events are POSTed (http or https).")
    event_types: EventTypes = Field(description="Which events to send.")
    secret: Secret
    active: bool = True
    description: Description | None = None

    _check_url = field_validator("url")(_http_url)
    _dedupe = field_validator("event_types")(_distinct)


class SubscriptionUpdate(StrictModel):
    """Fields to change; a new ``secret`` replaces the old one (it cannot be removed)."""

    url: Url | None = None
    event_types: EventTypes | None = None
    secret: Secret | None = None
    active: bool | None = None
    description: Description | None = None

    _check_url = field_validator("url")(_http_url)
    _dedupe = field_validator("event_types")(_distinct)


class SubscriptionOut(BaseModel):
    id: str = Field(examples=["whs_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    url: str
    event_types: list[EventType]
    active: bool
    description: str | None
    secret: str = Field(description="Masked hint of the signing secret (the secret itself is never shown).")
    created_at: datetime
    updated_at: datetime


class SubscriptionTestIn(StrictModel):
    event_type: EventType = Field(
        default="call.ended", description="Which event to send a sample of (marked ``test: true``)."
    )


class AttemptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    number: int
    outcome: AttemptOutcome
    status_code: int | None = Field(description="The receiver's HTTP status (null when there was none).")
    latency_ms: float
    error: str | None = Field(description="Why the attempt did not deliver, in a sentence.")
    response_snippet: str | None = Field(description="The first 200 characters of the receiver's answer.")
    started_at: datetime


class DeliveryOut(BaseModel):
    id: str = Field(examples=["whd_01JD5Z8W3K2Q4V6N8R0T2X4Z6B"])
    kind: DeliveryKind
    subscription_id: str
    event_id: str
    event_type: str
    url: str
    status: DeliveryStatus
    delivered: bool
    attempts: int
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    attempt_log: list[AttemptOut] = Field(default_factory=list)


class DeliveryDetailOut(DeliveryOut):
    payload: dict[str, Any] = Field(description="The exact JSON body every attempt sends.")


class TestFailedOut(BaseModel):
    """A test event the receiver did not accept (502) or did not answer in time (504)."""

    detail: str
    code: str
    delivery: DeliveryOut
