"""Request and response bodies of the channel routes, WhatsApp accounts and the WhatsApp webhook."""

from __future__ import annotations

import itertools
import re
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import available_timezones

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parley.kit.schemas import StrictModel, is_dialable, normalize_phone


class ChannelKind(StrEnum):
    phone = "phone"
    whatsapp = "whatsapp"
    web = "web"


WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
WIDGET_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def minutes(clock: str) -> int:
    hours, mins = clock.split(":")
    return int(hours) * 60 + int(mins)


Clock = Annotated[str, Field(pattern=r"^(?:[01]\d|2[0-3]):[0-5]\d$|^24:00$", examples=["09:00"])]
Window = Annotated[list[Clock], Field(min_length=2, max_length=2, examples=[["09:00", "17:00"]])]


class OfficeHours(StrictModel):
    """Weekly opening windows in a time zone; outside them (and on holidays) the fallback flow answers."""

    timezone: str = Field(max_length=64, examples=["Europe/Berlin"], description="IANA time zone name.")
    weekly: dict[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"], list[Window]] = Field(
        description='Opening windows per weekday, e.g. {"mon": [["09:00", "12:00"], ["13:00", "17:00"]]}. '
        "Days not listed are closed. 24:00 ends a window at midnight; split overnight windows in two.",
        examples=[{"mon": [["09:00", "17:00"]], "sat": [["10:00", "13:00"]]}],
    )
    holidays: list[date] = Field(
        default_factory=list, max_length=366, description="Local dates on which the office is closed all day."
    )

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value not in available_timezones():
            raise ValueError("must be an IANA time zone such as Europe/Berlin")
        return value

    @field_validator("weekly")
    @classmethod
    def _windows(cls, value: dict[str, list[list[str]]]) -> dict[str, list[list[str]]]:
        for day, windows in value.items():
            if len(windows) > 12:
                raise ValueError(f"{day} has more than 12 windows")
            spans = sorted((minutes(a), minutes(b)) for a, b in windows)
            for start, end in spans:
                if end <= start:
                    raise ValueError(
                        f"a window on {day} ends before it starts; write overnight hours as two windows "
                        "(e.g. mon 22:00-24:00 and tue 00:00-06:00)"
                    )
            for (_, end), (start, _) in itertools.pairwise(spans):
                if start < end:
                    raise ValueError(f"the windows on {day} overlap")
        return {day: value[day] for day in WEEKDAYS if day in value}


def _check_address(kind: ChannelKind, address: str) -> str:
    if kind == ChannelKind.phone:
        number = normalize_phone(address)
        if not is_dialable(number):
            raise ValueError("a phone route's address must be an E.164 number such as +4930123456")
        return number
    if kind == ChannelKind.whatsapp:
        if not re.fullmatch(r"wa_[0-9A-Z]{26}", address):
            raise ValueError("a whatsapp route's address must be a WhatsApp account id (wa_...)")
        return address
    if not WIDGET_KEY.match(address):
        raise ValueError("a web route's address must be a widget key of 1-64 letters, digits, _ or -")
    return address


class RouteCreate(StrictModel):
    channel_kind: ChannelKind
    address: str = Field(
        min_length=1,
        max_length=80,
        description="An E.164 number (phone), a WhatsApp account id (whatsapp) or a widget key (web).",
        examples=["+4930123456"],
    )
    flow_id: str = Field(min_length=1, max_length=40, description="The flow that answers.")
    fallback_flow_id: str | None = Field(
        default=None, max_length=40, description="Answers outside office hours (none: nobody answers then)."
    )
    office_hours: OfficeHours | None = None
    name: str | None = Field(default=None, max_length=200)
    enabled: bool = True

    @model_validator(mode="after")
    def _address(self) -> RouteCreate:
        self.address = _check_address(self.channel_kind, self.address)
        return self


class RouteUpdate(StrictModel):
    """Fields to change; ``null`` clears office_hours, fallback_flow_id or name."""

    address: str | None = Field(default=None, min_length=1, max_length=80)
    flow_id: str | None = Field(default=None, min_length=1, max_length=40)
    fallback_flow_id: str | None = Field(default=None, max_length=40)
    office_hours: OfficeHours | None = None
    name: str | None = Field(default=None, max_length=200)
    enabled: bool | None = None


class RouteOut(BaseModel):
    id: str
    name: str | None
    channel_kind: ChannelKind
    address: str
    flow_id: str
    fallback_flow_id: str | None
    office_hours: OfficeHours | None
    enabled: bool
    created_at: datetime
    updated_at: datetime


class ResolvedRoute(BaseModel):
    channel_kind: ChannelKind
    address: str
    at: datetime = Field(description="The moment asked about (UTC).")
    route_id: str | None = Field(description="The matching route, if any.")
    open: bool | None = Field(description="Within office hours (always true without office hours).")
    flow_id: str | None = Field(description="The flow that answers then; null: nobody answers.")


# --- WhatsApp accounts ------------------------------------------------------------------------------

_DIGITS = r"^[0-9]{1,40}$"


class AccountCreate(StrictModel):
    name: str | None = Field(default=None, max_length=200, examples=["Autohaus Demo WhatsApp"])
    phone_number_id: str = Field(pattern=_DIGITS, description="Cloud API phone number id (Meta).")
    waba_id: str = Field(pattern=_DIGITS, description="WhatsApp Business Account id.")
    display_phone_number: str = Field(min_length=3, max_length=40, examples=["+49 30 1234567"])
    verify_token: str = Field(
        min_length=8, max_length=200, description="Your chosen token Meta sends when verifying the webhook."
    )
    access_token: str = Field(min_length=8, max_length=2000, description="Graph API access token.")
    app_secret: str = Field(min_length=8, max_length=200, description="The Meta app's secret (signatures).")
    unsupported_reply: str | None = Field(
        default=None,
        max_length=1000,
        description="Sent when someone sends something other than text (default: an English sentence).",
    )


class AccountUpdate(StrictModel):
    """Fields to change. Omitted secrets (or the masked hint sent back) keep the stored secret."""

    name: str | None = Field(default=None, max_length=200)
    waba_id: str | None = Field(default=None, pattern=_DIGITS)
    display_phone_number: str | None = Field(default=None, min_length=3, max_length=40)
    verify_token: str | None = Field(default=None, min_length=4, max_length=200)
    access_token: str | None = Field(default=None, min_length=4, max_length=2000)
    app_secret: str | None = Field(default=None, min_length=4, max_length=200)
    unsupported_reply: str | None = Field(default=None, max_length=1000)


class AccountOut(BaseModel):
    id: str
    name: str | None
    phone_number_id: str
    waba_id: str
    display_phone_number: str
    verify_token: str = Field(description="Masked hint.")
    access_token: str = Field(description="Masked hint.")
    app_secret: str = Field(description="Masked hint.")
    unsupported_reply: str | None
    webhook_path: str = Field(description="Where Meta sends events (one URL for every account).")
    created_at: datetime
    updated_at: datetime


class MessageOut(BaseModel):
    id: str
    direction: Literal["in", "out"]
    wamid: str | None
    wa_id: str
    type: str
    text: str | None
    status: str
    session_id: str | None
    error: str | None
    created_at: datetime
    processed_at: datetime | None


# --- the webhook (Meta's payload; only what is read is modelled, everything else is allowed) ----


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class WebhookText(_Loose):
    body: str = Field(max_length=65536)


class WebhookMessage(_Loose):
    id: str = Field(min_length=1, max_length=200, description="The wamid.")
    from_: str = Field(alias="from", min_length=1, max_length=40)
    type: str = Field(max_length=40)
    timestamp: str | None = None
    text: WebhookText | None = None
    button: dict[str, Any] | None = None
    interactive: dict[str, Any] | None = None


class WebhookMetadata(_Loose):
    phone_number_id: str = Field(min_length=1, max_length=40)
    display_phone_number: str | None = None


class WebhookValue(_Loose):
    messaging_product: str | None = None
    metadata: WebhookMetadata | None = None
    messages: list[WebhookMessage] = Field(default_factory=list, max_length=1000)
    statuses: list[dict[str, Any]] = Field(default_factory=list)


class WebhookChange(_Loose):
    field: str | None = None
    value: WebhookValue | None = None


class WebhookEntry(_Loose):
    id: str | None = None
    changes: list[WebhookChange] = Field(default_factory=list, max_length=1000)


class WebhookPayload(_Loose):
    """What Meta POSTs: ``entry[].changes[].value`` with ``metadata.phone_number_id`` and ``messages``."""

    object: str
    entry: list[WebhookEntry] = Field(max_length=1000)


class WebhookAck(BaseModel):
    received: int = Field(description="New messages accepted for processing.")
    duplicates: int = Field(description="Messages already received before (replays); not processed again.")
    ignored: int = Field(description="Changes for unknown phone numbers, statuses and other events.")
