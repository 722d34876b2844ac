"""Campaign request and response bodies."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from parley.kit.schemas import E164, StrictModel

CampaignStatus = Literal["draft", "running", "paused", "completed", "cancelled"]
ContactStatus = Literal[
    "pending",
    "dialing",
    "in_call",
    "completed",
    "busy",
    "no_answer",
    "failed",
    "voicemail",
    "do_not_call",
    "cancelled",
]
RetryableResult = Literal["busy", "no_answer", "failed"]
VoicemailHandling = Literal["leave_message", "hang_up"]
_RETRY_DEFAULT: tuple[RetryableResult, ...] = ("busy", "no_answer", "failed")

_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$")


class CallingWindow(StrictModel):
    """When calls may start, in the organization's time zone: ISO weekdays (1 Monday … 7 Sunday) and a
    time span ``start`` ≤ now < ``end`` (``24:00`` ends at midnight)."""

    weekdays: list[int] = Field(description="ISO weekdays, 1 (Monday) to 7 (Sunday).", max_length=7)
    start: str = Field(examples=["09:00"], description="HH:MM, the first minute calls may start.")
    end: str = Field(examples=["18:00"], description="HH:MM, no call starts at or after it.")

    @field_validator("weekdays")
    @classmethod
    def _days(cls, value: list[int]) -> list[int]:
        if any(day < 1 or day > 7 for day in value):
            raise ValueError("weekdays are ISO numbers: 1 (Monday) to 7 (Sunday)")
        return sorted(set(value))

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not _CLOCK.match(value):
            raise ValueError(f"{value!r} is not a time of day as HH:MM (00:00 to 24:00)")
        return value


class CampaignWrite(StrictModel):
    """Fields shared by create and update (update sends only what changes)."""

    @model_validator(mode="after")
    def _opens(self) -> Any:
        windows: list[CallingWindow] | None = getattr(self, "windows", None)
        if windows is not None:
            if not windows:
                raise ValueError(
                    "windows: at least one calling window is needed, or no call could ever start"
                )
            for i, window in enumerate(windows):
                if not window.weekdays:
                    raise ValueError(f"windows[{i}] names no weekday, so it never opens")
                if window.start >= window.end:
                    raise ValueError(
                        f"windows[{i}] never opens: its start {window.start} is not before its end {window.end}"
                    )
        return self


class CampaignCreate(CampaignWrite):
    name: str = Field(min_length=1, max_length=120)
    flow_id: str = Field(min_length=1, max_length=40, description="The flow; its published version talks.")
    caller_id: E164 = Field(description="One of the organization's phone numbers (telephony), E.164.")
    windows: list[CallingWindow] = Field(
        default_factory=lambda: [CallingWindow(weekdays=[1, 2, 3, 4, 5], start="09:00", end="18:00")],
        max_length=14,
        description="When calls may start, in the organization's time zone. Default Mon–Fri 09:00–18:00.",
    )
    holidays: list[date] = Field(default_factory=list, max_length=366, description="Days without calls.")
    concurrency: int = Field(default=1, ge=1, le=50, description="Calls at the same time, at most.")
    max_attempts: int = Field(default=3, ge=1, le=10, description="Calls per contact, at most.")
    retry_backoff_minutes: int = Field(
        default=60, ge=1, le=10080, description="Wait before try n+1: this many minutes times n."
    )
    retry_on: list[RetryableResult] = Field(
        default_factory=lambda: list(_RETRY_DEFAULT), description="Results that are tried again."
    )
    voicemail: VoicemailHandling = Field(
        default="hang_up", description="On an answering machine: leave voicemail_message, or hang up."
    )
    voicemail_message: str | None = Field(default=None, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _message(self) -> CampaignCreate:
        if self.voicemail == "leave_message" and not self.voicemail_message:
            raise ValueError("voicemail 'leave_message' needs a voicemail_message to speak")
        return self


class CampaignUpdate(CampaignWrite):
    name: str | None = Field(default=None, min_length=1, max_length=120)
    windows: list[CallingWindow] | None = Field(default=None, max_length=14)
    holidays: list[date] | None = Field(default=None, max_length=366)
    concurrency: int | None = Field(default=None, ge=1, le=50)
    max_attempts: int | None = Field(default=None, ge=1, le=10)
    retry_backoff_minutes: int | None = Field(default=None, ge=1, le=10080)
    retry_on: list[RetryableResult] | None = None
    voicemail: VoicemailHandling | None = None
    voicemail_message: str | None = Field(default=None, min_length=1, max_length=1000)


class ContactCounts(BaseModel):
    total: int = 0
    pending: int = 0
    dialing: int = 0
    in_call: int = 0
    completed: int = 0
    busy: int = 0
    no_answer: int = 0
    failed: int = 0
    voicemail: int = 0
    do_not_call: int = 0
    cancelled: int = 0


class CampaignOut(BaseModel):
    id: str
    name: str
    flow_id: str
    caller_id: str
    windows: list[CallingWindow]
    holidays: list[date]
    timezone: str
    concurrency: int
    max_attempts: int
    retry_backoff_minutes: int
    retry_on: list[str]
    voicemail: str
    voicemail_message: str | None
    status: CampaignStatus
    contacts: ContactCounts
    started_at: datetime | None
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime


class ContactIn(StrictModel):
    phone: str = Field(min_length=1, max_length=40, description="E.164; separators are dropped.")
    variables: dict[str, Any] = Field(default_factory=dict, description="Start values for the flow.")


class ContactOut(BaseModel):
    id: str
    row_number: int
    phone: str
    variables: dict[str, Any]
    status: ContactStatus
    attempts: int
    last_result: str | None
    last_error: str | None
    answered_by: str | None
    call_id: str | None
    provider_call_id: str | None
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None


class RowError(BaseModel):
    row: int = Field(description="1 is the first data row (after a CSV header), or the first JSON item.")
    phone: str | None
    error: str


class UploadOut(BaseModel):
    accepted: int
    total_contacts: int


class DoNotCallIn(StrictModel):
    phone: E164
    note: str | None = Field(default=None, max_length=200)


class DoNotCallBulkIn(StrictModel):
    phones: list[str] = Field(min_length=1, max_length=10000)
    note: str | None = Field(default=None, max_length=200)


class DoNotCallOut(BaseModel):
    id: str
    phone: str
    note: str | None
    created_at: datetime


class DoNotCallBulkOut(BaseModel):
    added: int
    already_listed: int
