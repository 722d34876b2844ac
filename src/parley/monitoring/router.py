from __future__ import annotations

from fastapi import Response

from parley.auth.dependencies import OrgReader
from parley.calls import service
from parley.calls.filters import CallFilter
from parley.calls.schemas import CallSummaryOut
from parley.kit.db import DbSession
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.sessions import service as sessions
from parley.sessions.models import ConversationSession
from parley.sessions.schemas import LiveSessionOut

router = ParleyRouter(prefix="/api/monitoring", tags=["Monitoring"])
# Included before the calls' routes (parley.app) so the API document keeps its order.
live_router = ParleyRouter(prefix="/api/monitoring", tags=["Monitoring"])


@live_router.get("/sessions/live", summary="List Live Sessions", response_model=Page[LiveSessionOut])
async def list_live_sessions(
    session: DbSession, context: OrgReader, page: Pagination
) -> Page[LiveSessionOut]:
    """The organization's sessions that have not ended yet, newest first."""
    rows, cursor = await paginate(
        session, sessions.live_query(context.organization_id), ConversationSession.id, page
    )
    return Page[LiveSessionOut](items=[sessions.to_live(r) for r in rows], next_cursor=cursor)


@router.get("/calls/history", summary="List Monitoring Calls History", response_model=Page[CallSummaryOut])
async def list_monitoring_calls_history(
    session: DbSession, context: OrgReader, page: Pagination, filters: CallFilter
) -> Response:
    """Ended calls, newest first: flow, channel, caller, start, duration, outcome, signal types, turn
    count and mean voice latency. Filter by time range (`since`/`until` on the start), flow, channel,
    outcome, caller and signals."""
    body = await service.list_calls(session, context.organization_id, filters, page)
    return Response(body, media_type="application/json")
