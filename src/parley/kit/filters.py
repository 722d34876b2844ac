"""Query filters every list endpoint shares: a time window and text that PostgreSQL can compare."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import Query
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute

from parley.kit.errors import BadRequest


def text_filter(value: str | None, name: str) -> str | None:
    """PostgreSQL cannot compare text with NUL characters; no stored value has one."""
    if value is not None and "\x00" in value:
        raise BadRequest(f"{name} may not contain NUL characters.")
    return value


def as_utc(value: datetime | None, name: str) -> datetime | None:
    """Query datetimes without an offset are UTC; ones that cannot be expressed in UTC are refused."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise BadRequest(f"{name} is out of range once converted to UTC.") from exc


T = TypeVar("T", bound=Any)


def created_within(
    stmt: Select[T], column: InstrumentedAttribute[datetime], since: datetime | None, until: datetime | None
) -> Select[T]:
    """Rows whose ``column`` is at or after ``since`` and before ``until`` (either may be absent; 400 for a
    time that cannot be expressed in UTC)."""
    if (start := as_utc(since, "since")) is not None:
        stmt = stmt.where(column >= start)
    if (end := as_utc(until, "until")) is not None:
        stmt = stmt.where(column < end)
    return stmt


Since = Annotated[
    datetime | None, Query(description="Only from this time on (ISO 8601; UTC when no offset is given).")
]
Until = Annotated[datetime | None, Query(description="Only before this time (exclusive).")]
