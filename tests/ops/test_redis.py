"""Redis down: readiness reports degraded (200, not 503), requests go on, no 500s."""

from __future__ import annotations

from pathlib import Path

import httpx

from parley.app import create_app
from parley.config import Settings
from parley.system.health import redis_health
from tests.conftest import auth, make_token
from tests.ops.redis_server import redis_server


async def test_redis_health_answers_ping_and_loss(tmp_path: Path, settings: Settings) -> None:
    assert await redis_health(settings) is None  # not configured
    with redis_server(tmp_path) as redis:
        settings.redis_url = redis.url
        assert await redis_health(settings) is True
        redis.stop()
        assert await redis_health(settings) is False
    settings.redis_url = "http://127.0.0.1:1/"
    assert await redis_health(settings) is False


async def test_readyz_degraded_without_redis(tmp_path: Path, settings: Settings, database: object) -> None:
    with redis_server(tmp_path) as redis:
        settings.redis_url = redis.url
        app = create_app(settings, database=database)  # type: ignore[arg-type]
        token = make_token("ops-redis")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}

            redis.stop()
            degraded = await client.get("/readyz")
            created = await client.post("/api/organizations", json={"name": "No Redis"}, headers=auth(token))
            listed = await client.get("/api/organizations", headers=auth(token))

    assert degraded.status_code == 200
    assert degraded.json() == {"status": "degraded", "checks": {"database": "ok", "redis": "unreachable"}}
    assert created.status_code == 200, created.text
    assert listed.status_code == 200
