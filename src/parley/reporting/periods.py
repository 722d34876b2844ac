"""Time ranges and calendar periods (days or months in the organization's time zone)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import Organization
from parley.kit.db import utcnow
from parley.kit.errors import BadRequest
from parley.kit.filters import as_utc

Granularity = Literal["day", "month"]
DEFAULT_DAYS = 30


def resolve_range(since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    """``[since, until)`` in UTC; by default the last 30 days."""
    end = as_utc(until, "until") or utcnow()
    start = as_utc(since, "since")
    if start is None:
        try:
            start = end - timedelta(days=DEFAULT_DAYS)
        except OverflowError as exc:
            raise BadRequest("until is too early to count 30 days back; give since as well.") from exc
    if start >= end:
        raise BadRequest("since must be before until.")
    return start, end


async def organization_zone(session: AsyncSession, organization_id: str) -> ZoneInfo:
    org = await session.get(Organization, organization_id)
    try:
        return ZoneInfo(org.timezone if org is not None else "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def period_of(moment: datetime, zone: ZoneInfo, granularity: Granularity) -> str:
    """``2026-03-02`` (day) or ``2026-03`` (month) in the organization's time zone."""
    local = moment.astimezone(zone)
    return local.strftime("%Y-%m-%d") if granularity == "day" else local.strftime("%Y-%m")
