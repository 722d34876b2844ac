from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.brain import service
from parley.brain.models import BrainSignal
from parley.brain.schemas import SignalOut, SignalStatus, SignalUpdate
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import documented
from parley.kit.filters import Since, Until
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import Severity

router = ParleyRouter(prefix="/api/brain", tags=["Brain"])

SignalId = Annotated[str, Path(alias="signalId", max_length=40, description="Brain signal id (sig_...).")]


@router.get("/signals", summary="List Brain Signals", response_model=Page[SignalOut])
async def list_brain_signals(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    type: Annotated[str | None, Query(max_length=60, description="Only signals of this type.")] = None,
    severity: Annotated[Severity | None, Query(description="Only signals of this severity.")] = None,
    status: Annotated[SignalStatus | None, Query(description="Only signals in this status.")] = None,
    call_id: Annotated[str | None, Query(max_length=40, description="Only signals of this call.")] = None,
    flow_id: Annotated[str | None, Query(max_length=40, description="Only signals of this flow.")] = None,
    since: Since = None,
    until: Until = None,
) -> Page[SignalOut]:
    """The organization's brain signals, newest first; `since`/`until` apply to when they were stored."""
    filters = service.SignalFilters(type, severity, status, call_id, flow_id, since, until)
    rows, cursor = await paginate(
        session, service.signals_query(context.organization_id, filters), BrainSignal.id, page
    )
    return Page[SignalOut](items=[SignalOut.model_validate(s) for s in rows], next_cursor=cursor)


@router.get("/signals/{signalId}", summary="Get Brain Signal", response_model=SignalOut)
async def get_brain_signal(session: DbSession, context: OrgReader, signal_id: SignalId) -> SignalOut:
    return SignalOut.model_validate(await service.get_signal(session, context, signal_id))


@router.patch(
    "/signals/{signalId}", summary="Update Brain Signal", response_model=SignalOut, responses=documented(409)
)
async def update_brain_signal(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    signal_id: SignalId,
    data: Annotated[SignalUpdate, ParsedBody(SignalUpdate)],
) -> SignalOut:
    """Acknowledge or resolve a signal (members and above). A resolved signal stays resolved (409)."""
    signal = await service.update_signal(session, context, signal_id, data)
    describe(request, "brain_signal", signal.id, status=signal.status)
    return SignalOut.model_validate(signal)
