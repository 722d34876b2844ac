from __future__ import annotations

from fastapi import APIRouter

from parley.auth.dependencies import OrgReader
from parley.calls import service
from parley.calls.filters import CallFilter
from parley.calls.models import Call
from parley.calls.schemas import CallSummaryOut
from parley.kit.db import DbSession
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.tenancy import scoped

router = APIRouter(prefix="/api/monitoring", tags=["Monitoring"])


@router.get("/calls/history", summary="List Monitoring Calls History", response_model=Page[CallSummaryOut])
async def list_monitoring_calls_history(
    session: DbSession, context: OrgReader, page: Pagination, filters: CallFilter
) -> Page[CallSummaryOut]:
    """Ended calls, newest first: flow, channel, caller, start, duration, outcome, signal types, turn
    count and mean voice latency. Filter by time range (`since`/`until` on the start), flow, channel,
    outcome, caller and signals."""
    stmt = filters.apply(scoped(Call, context.organization_id), context.organization_id)
    rows, cursor = await paginate(session, stmt, Call.id, page)
    return Page[CallSummaryOut](items=[service.to_summary(c) for c in rows], next_cursor=cursor)
