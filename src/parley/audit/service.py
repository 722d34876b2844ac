"""Writing audit events. Every mutating request gets one, inside its own transaction."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.models import AuditEvent
from parley.auth.principal import Principal
from parley.kit.db import SAFE_METHODS, before_commit
from parley.kit.ids import new_id


def describe(request: Request, resource_type: str, resource_id: str | None, **details: Any) -> None:
    """Name the resource a handler acted on (the default is taken from the path parameters)."""
    request.state.audit_resource = (resource_type, resource_id)
    if details:
        request.state.audit_details = details


def set_organization(request: Request, organization_id: str) -> None:
    request.state.audit_organization_id = organization_id


def audit_mutations(request: Request, session: AsyncSession, principal: Principal) -> None:
    """Register the request's audit event; it is written just before the transaction commits."""
    if request.method in SAFE_METHODS:
        return

    async def write(session: AsyncSession) -> None:
        state = request.state
        route = request.scope.get("route")
        resource_type, resource_id = getattr(state, "audit_resource", (None, None))
        if resource_type is None:
            params = request.path_params
            resource_id = next(iter(params.values()), None) if params else None
            resource_type = getattr(route, "tags", [None])[0] if route is not None and route.tags else None
        client = request.client
        session.add(
            AuditEvent(
                id=new_id("aud"),
                organization_id=getattr(state, "audit_organization_id", None)
                or getattr(state, "organization_id", None)  # the active organization auth resolved
                or principal.api_key_organization_id,
                actor_type=principal.kind,
                actor_id=principal.id,
                action=getattr(route, "name", None) or f"{request.method} {request.url.path}",
                resource_type=resource_type,
                resource_id=str(resource_id) if resource_id is not None else None,
                method=request.method,
                path=request.url.path[:500],
                ip=client.host if client else None,
                user_agent=(request.headers.get("user-agent") or "")[:300] or None,
                request_id=getattr(state, "request_id", None),
                details=getattr(state, "audit_details", None),
            )
        )

    before_commit(session, write)


def events_query(organization_id: str) -> Select[AuditEvent]:
    return select(AuditEvent).where(AuditEvent.organization_id == organization_id)
