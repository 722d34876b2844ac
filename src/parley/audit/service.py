"""The audit trail: :func:`record` is the one place an audit event is built, and the trail's query.

Every mutating authenticated request gets an event through :func:`parley.audit.dependencies.audit_mutations`;
requests without a bearer principal (the Twilio voice webhook, the OAuth callback) call :func:`record`
themselves, naming their actor. The HTTP facts arrive as :class:`RequestFacts`, so no service here
sees a request object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.models import AuditEvent
from parley.kit.db import PlainStatement, utcnow
from parley.kit.ids import new_id


@dataclass(frozen=True)
class RequestFacts:
    """What an audit event keeps of the HTTP request that caused it."""

    method: str
    path: str
    ip: str | None = None
    user_agent: str | None = None
    request_id: str | None = None


def event_values(
    request: RequestFacts,
    *,
    organization_id: str | None,
    actor_type: str,
    actor_id: str,
    action: str,
    resource_type: str | None = None,
    resource_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One audit event's columns, for :func:`record` or :func:`write_event`."""
    return {
        "id": new_id("aud"),
        "organization_id": organization_id,
        "actor_type": actor_type,
        "actor_id": actor_id,
        "action": action,
        "resource_type": resource_type,
        "resource_id": resource_id,
        "method": request.method,
        "path": request.path[:500],
        "ip": request.ip,
        "user_agent": (request.user_agent or "")[:300] or None,
        "request_id": request.request_id,
        "details": details,
        "created_at": utcnow(),
    }


def record(session: AsyncSession, values: dict[str, Any]) -> AuditEvent:
    """Add one audit event to the session's transaction (it is written with the change it records)."""
    event = AuditEvent(**values)
    session.add(event)
    return event


# Every mutating request writes one event: a plain INSERT, without an ORM object and its flush.
_INSERT_EVENT = insert(cast(Table, AuditEvent.__table__))


def pending_event(values: Callable[[], dict[str, Any]]) -> PlainStatement:
    """The audit event as a before-commit hook: ``values()`` (made at commit time) in one INSERT."""
    return PlainStatement(_INSERT_EVENT, values)


async def write_event(session: AsyncSession, values: dict[str, Any]) -> None:
    """Write one audit event in the session's transaction now (``record`` leaves it to the flush)."""
    await session.execute(_INSERT_EVENT, values)


@dataclass(frozen=True)
class EventFilters:
    action: str | None = None
    actor_id: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def events_query(organization_id: str, filters: EventFilters | None = None) -> Select[AuditEvent]:
    """The organization's audit events matching ``filters`` (empty values do not filter)."""
    stmt = select(AuditEvent).where(AuditEvent.organization_id == organization_id)
    if filters is None:
        return stmt
    if filters.action:
        stmt = stmt.where(AuditEvent.action == filters.action)
    if filters.actor_id:
        stmt = stmt.where(AuditEvent.actor_id == filters.actor_id)
    if filters.resource_type:
        stmt = stmt.where(AuditEvent.resource_type == filters.resource_type)
    if filters.resource_id:
        stmt = stmt.where(AuditEvent.resource_id == filters.resource_id)
    if filters.since:
        stmt = stmt.where(AuditEvent.created_at >= filters.since)
    if filters.until:
        stmt = stmt.where(AuditEvent.created_at < filters.until)
    return stmt
