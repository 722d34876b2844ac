"""Which flow answers an address now: the route, its office hours (time-zone aware) and fallback.

Self-contained so any channel can call it: the WhatsApp webhook, the telephony webhook, a web widget.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.channels.models import ChannelRoute
from parley.channels.schemas import WEEKDAYS, ChannelKind, minutes
from parley.flows.models import Flow
from parley.kit.schemas import normalize_phone


def is_open(office_hours: dict[str, Any] | None, at: datetime) -> bool:
    """Whether ``at`` (an aware datetime; naive counts as UTC) lies within the office hours.

    The moment is converted to the office's time zone first, so DST shifts move the windows with the
    local clock. Holidays (local dates) are closed all day. No office hours: always open.
    """
    if not office_hours:
        return True
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    local = at.astimezone(ZoneInfo(str(office_hours["timezone"])))
    if local.date().isoformat() in {str(d) for d in office_hours.get("holidays") or []}:
        return False
    now = local.hour * 60 + local.minute
    windows = (office_hours.get("weekly") or {}).get(WEEKDAYS[local.weekday()]) or []
    return any(minutes(start) <= now < minutes(end) for start, end in windows)


@dataclass(frozen=True)
class Resolution:
    route: ChannelRoute | None
    open: bool | None
    flow_id: str | None


def normalize_address(kind: str, address: str) -> str:
    return normalize_phone(address) if kind == ChannelKind.phone else address


async def find_route(
    session: AsyncSession, organization_id: str, *, kind: str, address: str
) -> ChannelRoute | None:
    return await session.scalar(
        select(ChannelRoute).where(
            ChannelRoute.organization_id == organization_id,
            ChannelRoute.channel_kind == str(kind),
            ChannelRoute.address == normalize_address(str(kind), address),
        )
    )


async def resolve(
    session: AsyncSession, organization_id: str, *, kind: str, address: str, at: datetime | None = None
) -> Resolution:
    """The route for the address and the flow that answers at ``at`` (default now)."""
    route = await find_route(session, organization_id, kind=kind, address=address)
    if route is None or not route.enabled:
        return Resolution(route, None, None)
    moment = at or datetime.now(UTC)
    open_now = is_open(route.office_hours, moment)
    flow_id = route.flow_id if open_now else route.fallback_flow_id
    if flow_id is not None:
        exists = await session.scalar(
            select(Flow.id).where(Flow.id == flow_id, Flow.organization_id == organization_id)
        )
        flow_id = exists
    return Resolution(route, open_now, flow_id)


async def resolve_flow(
    session: AsyncSession, organization_id: str, *, kind: str, address: str, at: datetime | None = None
) -> str | None:
    """The flow id that answers ``address`` of channel ``kind`` at ``at`` (default now), or None.

    ``kind`` is ``phone`` (address an E.164 number; spaces, dashes and brackets are ignored),
    ``whatsapp`` (a WhatsApp account id) or ``web`` (a widget key). None when no enabled route
    matches, or when it is outside office hours and the route has no fallback flow.
    """
    return (await resolve(session, organization_id, kind=kind, address=address, at=at)).flow_id
