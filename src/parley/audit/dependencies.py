"""The audit trail's side of the HTTP layer: naming what a handler acted on, and auditing mutations.

:func:`audit_mutations` is handed to auth at start-up (``parley.app``): auth calls it once a request's
principal is known and never imports audit. It registers the request's audit event, written through
a plain INSERT (:func:`parley.audit.service.pending_event`) just before the transaction commits
(or with the request's own write, ``kit.db.commit_now``).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.service import RequestFacts, event_values, pending_event
from parley.auth.principal import Principal
from parley.kit.db import SAFE_METHODS, before_commit


def request_facts(request: Request) -> RequestFacts:
    client = request.client
    return RequestFacts(
        method=request.method,
        path=request.scope["path"],  # the URL object (urlsplit of the whole URL) is not needed
        ip=client.host if client else None,
        user_agent=request.headers.get("user-agent"),
        request_id=getattr(request.state, "request_id", None),
    )


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

    def values() -> dict[str, Any]:
        state = request.state
        route = request.scope.get("route")
        resource_type, resource_id = getattr(state, "audit_resource", (None, None))
        if resource_type is None:
            params = request.path_params
            resource_id = next(iter(params.values()), None) if params else None
            resource_type = getattr(route, "tags", [None])[0] if route is not None and route.tags else None
        return event_values(
            request_facts(request),
            organization_id=getattr(state, "audit_organization_id", None)
            or getattr(state, "organization_id", None)  # the active organization auth resolved
            or principal.api_key_organization_id,
            actor_type=principal.kind,
            actor_id=principal.id,
            action=getattr(route, "name", None) or f"{request.method} {request.url.path}",
            resource_type=resource_type,
            resource_id=str(resource_id) if resource_id is not None else None,
            details=getattr(state, "audit_details", None),
        )

    before_commit(session, pending_event(values))
