from __future__ import annotations

import platform
from typing import Literal

import structlog
from fastapi import Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from parley import __version__
from parley.auth.dependencies import CurrentPrincipal
from parley.kit.db import Database, unit_of_work
from parley.kit.lifecycle import lifecycle_of
from parley.kit.metrics import SESSIONS_ACTIVE, exposition
from parley.kit.responses import JSONBytesResponse
from parley.kit.routing import ParleyRouter
from parley.sessions.models import ConversationSession
from parley.system.health import database_health, redis_health

log = structlog.get_logger("parley.system")

router = ParleyRouter(tags=["System"])


class Health(BaseModel):
    """``ok``: ready. ``degraded``: serving, an optional dependency (Redis) is down. ``unavailable``:
    not ready (the database is unreachable, or the process is draining for shutdown)."""

    status: Literal["ok", "degraded", "unavailable"]
    checks: dict[str, str] = {}


class SystemInfo(BaseModel):
    version: str
    database: Literal["sqlite", "postgresql"]
    python: str
    auth_modes: list[str]


@router.get("/healthz", summary="Liveness", response_model=Health, include_in_schema=True)
async def healthz() -> Health:
    """The process is up and serving."""
    return Health(status="ok")


@router.get(
    "/readyz",
    summary="Readiness",
    response_model=Health,
    responses={
        503: {"model": Health, "description": "Not ready: the database is down or the process drains."}
    },
)
async def readyz(request: Request) -> Response:
    """Ready to take traffic: the database answers (503 when not). Redis, when configured, is checked
    too; without it the service runs degraded (200, rate limits fail open), so it stays in rotation."""
    state = request.app.state
    checks: dict[str, str] = {}
    database_ok = await database_health(state.db)
    checks["database"] = "ok" if database_ok else "unreachable"
    redis = await redis_health(state.settings)
    if redis is not None:
        checks["redis"] = "ok" if redis else "unreachable"
    draining = lifecycle_of(request.app).draining
    if draining:
        checks["shutdown"] = "draining"
    if not database_ok or draining:
        body = Health(status="unavailable", checks=checks)
        return JSONBytesResponse(body.model_dump(), status_code=503, headers={"Retry-After": "5"})
    if redis is False:
        log.warning("readiness_degraded", redis="unreachable")
        return JSONBytesResponse(Health(status="degraded", checks=checks).model_dump())
    return JSONBytesResponse(Health(status="ok", checks=checks).model_dump())


@router.get(
    "/metrics",
    summary="Prometheus Metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}},
)
async def metrics(request: Request) -> Response:
    """Prometheus metrics (docs/observability.md). The active-sessions gauge is refreshed from the
    database on each scrape; when the database is down it keeps its last value."""
    database: Database = request.app.state.db
    try:
        async with unit_of_work(database, write=False) as session:
            active = await session.scalar(
                select(func.count())
                .select_from(ConversationSession)
                .where(ConversationSession.status == "active")
            )
        SESSIONS_ACTIVE.set(active or 0)
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        log.warning("metrics_sessions_unavailable", error_type=type(exc).__name__)
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)


@router.get("/api/system/info", summary="Get System Info", response_model=SystemInfo)
async def system_info(request: Request, _principal: CurrentPrincipal) -> SystemInfo:
    settings = request.app.state.settings
    modes = []
    if settings.auth_jwt_secret is not None:
        modes.append("jwt-hs256")
    if settings.auth_jwks_url:
        modes.append("jwt-jwks")
    modes.append("api-key")
    return SystemInfo(
        version=__version__,
        database="sqlite" if settings.is_sqlite else "postgresql",
        python=platform.python_version(),
        auth_modes=modes,
    )
