from __future__ import annotations

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import auth, make_token


async def test_health_ready_metrics(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok", "checks": {}}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok"}
    await client.get("/api/me", headers=auth(make_token()))
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert 'parley_http_requests_total{method="GET",route="/api/me",status="200"}' in metrics.text


async def test_readyz_reports_unreachable_database(settings: Settings, tmp_path: object) -> None:
    broken = Database.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none", pool_timeout=1)
    app = create_app(settings, database=broken)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/readyz")
    await broken.dispose()
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "checks": {"database": "unreachable"}}
    assert response.headers["retry-after"] == "5"


async def test_request_ids(client: httpx.AsyncClient) -> None:
    generated = await client.get("/healthz")
    assert generated.headers["x-request-id"].startswith("req_")
    echoed = await client.get("/healthz", headers={"X-Request-Id": "trace-123"})
    assert echoed.headers["x-request-id"] == "trace-123"
    unsafe = await client.get("/healthz", headers={"X-Request-Id": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"].startswith("req_")


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    missing = await client.get("/api/nothing-here")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "No route matches GET /api/nothing-here.", "code": "not_found"}
    wrong = await client.put("/healthz")
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"


async def test_system_info(client: httpx.AsyncClient, db_url: str) -> None:
    info = (await client.get("/api/system/info", headers=auth(make_token()))).json()
    assert info["database"] == ("sqlite" if db_url.startswith("sqlite") else "postgresql")
    assert "jwt-hs256" in info["auth_modes"]


async def test_rate_limit_answers_429_with_retry_after(settings: Settings, database: Database) -> None:
    settings.rate_limit_per_minute = 3
    app = create_app(settings, database=database)
    headers = auth(make_token("speedy"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        statuses = [(await client.get("/api/me", headers=headers)).status_code for _ in range(4)]
        limited = await client.get("/api/me", headers=headers)
    assert statuses == [200, 200, 200, 429]
    assert limited.json()["code"] == "rate_limited"
    assert int(limited.headers["retry-after"]) >= 1


@pytest.mark.parametrize("path", ["/openapi.json"])
async def test_openapi_documents_bodies_and_errors(client: httpx.AsyncClient, path: str) -> None:
    spec = (await client.get(path)).json()
    create = spec["paths"]["/api/organizations"]["post"]
    assert set(create["requestBody"]["content"]) == {"application/json", "multipart/form-data", "text/plain"}
    assert {"200", "401", "403", "413", "415", "422", "429"} <= set(create["responses"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["bearerFormat"] == "JWT"
    for item in spec["paths"].values():
        for operation in item.values():
            # Every operation answers 200, except the identity provider's browser redirects (302).
            assert "200" in operation["responses"] or "302" in operation["responses"]


async def test_an_unreachable_database_is_503_not_500(settings: Settings) -> None:
    broken = Database.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/none", pool_timeout=1)
    app = create_app(settings, database=broken)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t"
    ) as client:
        response = await client.get("/api/me", headers=auth(make_token()))
    await broken.dispose()
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "service_unavailable"
    assert response.headers["retry-after"] == "2"
