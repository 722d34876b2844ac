from __future__ import annotations

import platform
from typing import Literal

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from parley import __version__
from parley.auth.dependencies import CurrentPrincipal
from parley.kit.db import Database
from parley.kit.responses import JSONBytesResponse

router = APIRouter(tags=["System"])


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
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
    responses={503: {"model": Health, "description": "A dependency is not ready."}},
)
async def readyz(request: Request) -> Response:
    """Ready to take traffic: the database answers."""
    database: Database = request.app.state.db
    try:
        async with database.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError):
        body = Health(status="unavailable", checks={"database": "unreachable"})
        return JSONBytesResponse(body.model_dump(), status_code=503, headers={"Retry-After": "5"})
    return JSONBytesResponse(Health(status="ok", checks={"database": "ok"}).model_dump())


@router.get(
    "/metrics",
    summary="Prometheus Metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format."}},
)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


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
