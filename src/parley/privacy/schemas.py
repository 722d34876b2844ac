from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parley.kit.schemas import StrictModel

RedactionKind = Literal["phone", "email", "iban", "card"]
# a language code (de, en, de-DE) or "default" (any other language)
NoticeLanguage = str


class CustomPatternIn(StrictModel):
    name: str = Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9_.-]+$")
    pattern: str = Field(
        min_length=1, max_length=500, description="A regular expression (Python `regex` syntax)."
    )
    replacement: str = Field(default="[redacted]", max_length=60)


class PrivacySettingsUpdate(StrictModel):
    """Fields left out keep their value."""

    redaction_enabled: bool | None = None
    redaction_kinds: list[RedactionKind] | None = Field(default=None, max_length=4)
    replacements: dict[RedactionKind, str] | None = Field(
        default=None, description='Replacement text per kind, e.g. {"phone": "[phone]"}.'
    )
    custom_patterns: list[CustomPatternIn] | None = Field(default=None, max_length=20)
    retention_days: int | None = Field(
        default=None,
        le=3650,
        description="Calls, recordings and transcripts older than this many days are deleted; "
        "null keeps them. 0 is refused (see docs/privacy.md).",
    )
    clear_retention: bool = Field(default=False, description="true: keep everything again (retention off).")
    recording_notice: dict[NoticeLanguage, str] | None = Field(
        default=None, description="Text per language spoken before the flow's greeting; {} turns it off."
    )


class CustomPatternOut(BaseModel):
    name: str
    pattern: str
    replacement: str


class PrivacySettingsOut(BaseModel):
    redaction_enabled: bool
    redaction_kinds: list[RedactionKind]
    replacements: dict[str, str]
    custom_patterns: list[CustomPatternOut]
    retention_days: int | None
    recording_notice: dict[str, str]
    updated_at: datetime | None


class RedactionPreviewIn(StrictModel):
    text: str = Field(max_length=10_000)


class RedactionPreviewOut(BaseModel):
    text: str
    redaction_enabled: bool


class CallExportOut(BaseModel):
    """Everything stored about one call."""

    exported_at: datetime
    call: dict[str, Any]


class CallerExportOut(BaseModel):
    """Everything stored about one caller's phone number, by where it is kept."""

    exported_at: datetime
    phone_number: str
    calls: list[dict[str, Any]]
    sources: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="Further records by holder: `sessions`, and any other registered."
    )


class CallerDeletedOut(BaseModel):
    phone_number: str
    deleted: bool = True
    calls: int
    recordings: int
    sources: dict[str, int] = Field(default_factory=dict)


class CallDeletedOut(BaseModel):
    id: str
    deleted: bool = True
    recording_deleted: bool
    sessions: int


class RetentionRunOut(BaseModel):
    retention_days: int | None
    calls: int
    recordings: int
    sources: dict[str, int] = Field(default_factory=dict)
