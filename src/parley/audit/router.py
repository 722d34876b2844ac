from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query

from parley.audit.models import AuditEvent
from parley.audit.schemas import AuditEventOut
from parley.audit.service import EventFilters, events_query
from parley.auth.dependencies import OrgAdmin
from parley.kit.db import DbSession
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter

router = ParleyRouter(prefix="/api/audit", tags=["Audit"])


@router.get("/events", summary="List Audit Events", response_model=Page[AuditEventOut])
async def list_audit_events(
    session: DbSession,
    context: OrgAdmin,
    page: Pagination,
    action: Annotated[str | None, Query(max_length=120)] = None,
    actor_id: Annotated[str | None, Query(max_length=40)] = None,
    resource_type: Annotated[str | None, Query(max_length=60)] = None,
    resource_id: Annotated[str | None, Query(max_length=80)] = None,
    since: Annotated[
        datetime | None, Query(description="Only events at or after this time (ISO 8601).")
    ] = None,
    until: Annotated[datetime | None, Query(description="Only events before this time (ISO 8601).")] = None,
) -> Page[AuditEventOut]:
    """The active organization's audit trail, newest first (owners and admins)."""
    filters = EventFilters(action, actor_id, resource_type, resource_id, since, until)
    rows, cursor = await paginate(
        session, events_query(context.organization_id, filters), AuditEvent.id, page
    )
    return Page[AuditEventOut](items=[AuditEventOut.model_validate(r) for r in rows], next_cursor=cursor)
