"""PostgreSQL lost under load: 503 with Retry-After while it is gone, 200 again soon after, no 500.

The app talks to the machine's PostgreSQL through a TCP proxy that the test cuts (every connection
reset, new ones refused) for a few seconds and then restores; the server process is never restarted.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth, make_token
from tests.live import serve_in_thread
from tests.ops.proxy import TcpProxy, tcp_proxy

pytestmark = pytest.mark.postgres

OUTAGE_SECONDS = 3.0
RECOVERY_DEADLINE = 30.0  # generous bound for "recovers within seconds" on a shared machine


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    name, url = migrated.postgres("parley_ops_outage")
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture
def proxied(pg_url: str, tmp_path: Path) -> Iterator[tuple[str, TcpProxy]]:
    parts = urlsplit(pg_url)
    with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        url = pg_url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}", 1)
        settings = Settings(
            data_dir=tmp_path / "data",
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            rate_limit_per_minute=0,
            db_pool_size=5,
            db_pool_timeout=2,
            db_connect_timeout=1,
            db_statement_timeout=3,
            log_level="ERROR",
            log_json=False,
        )
        with serve_in_thread(create_app(settings)) as base_url:
            yield base_url, proxy


class Load:
    """Clients reading and writing in a loop, recording every answer."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str], org: str) -> None:
        self.client, self.headers, self.org = client, headers, org
        self.statuses: Counter[int] = Counter()
        self.missing_retry_after = 0
        self.bodies_500: list[str] = []
        self.stop = False
        self.last_ok = 0.0

    async def one(self, worker: int, n: int) -> None:
        if (worker + n) % 4 == 0:
            response = await self.client.post(
                "/api/api-keys", json={"name": f"k{worker}-{n}"}, headers=self.headers
            )
        else:
            response = await self.client.get(f"/api/organizations/{self.org}", headers=self.headers)
        self.statuses[response.status_code] += 1
        if response.status_code == 200:
            self.last_ok = time.monotonic()
        if response.status_code == 503 and "retry-after" not in response.headers:
            self.missing_retry_after += 1
        if response.status_code >= 500 and response.status_code != 503:
            self.bodies_500.append(response.text[:300])

    async def worker(self, worker: int) -> None:
        n = 0
        while not self.stop:
            n += 1
            try:
                await self.one(worker, n)
            except httpx.TransportError as exc:  # the app server itself must stay up
                self.bodies_500.append(f"transport error {type(exc).__name__}")
            await asyncio.sleep(0.01)


async def _until_ok(client: httpx.AsyncClient, path: str, headers: dict[str, str], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if (await client.get(path, headers=headers)).status_code == 200:
            return True
        await asyncio.sleep(0.2)
    return False


async def test_postgres_outage_answers_503_and_recovers(proxied: tuple[str, TcpProxy]) -> None:
    base_url, proxy = proxied
    token = make_token("ops-outage")
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        created = await client.post("/api/organizations", json={"name": "Outage"}, headers=auth(token))
        assert created.status_code == 200, created.text
        org = created.json()["id"]
        headers = auth(token, org)
        load = Load(client, headers, org)
        workers = [asyncio.create_task(load.worker(i)) for i in range(6)]
        try:
            await asyncio.sleep(1.5)
            before = load.statuses[200]
            assert before > 0 and not load.bodies_500, (load.statuses, load.bodies_500[:3])

            await asyncio.to_thread(proxy.cut)
            await asyncio.sleep(OUTAGE_SECONDS / 2)
            ready = await client.get("/readyz")
            await asyncio.sleep(OUTAGE_SECONDS / 2)
            during: dict[int, int] = dict(load.statuses)
            await asyncio.to_thread(proxy.restore)

            recovered = await _until_ok(
                client, f"/api/organizations/{org}", headers, time.monotonic() + RECOVERY_DEADLINE
            )
            await asyncio.sleep(1.0)  # some load after the recovery
        finally:
            load.stop = True
            await asyncio.gather(*workers)
        after_ready = await client.get("/readyz")
        metrics = (await client.get("/metrics")).text

    assert ready.status_code == 503 and ready.json()["checks"]["database"] == "unreachable"
    assert during.get(503, 0) > 0, f"no 503 during the outage: {during}"
    assert load.missing_retry_after == 0
    assert not load.bodies_500, load.bodies_500[:3]
    assert set(load.statuses) <= {200, 503}, load.statuses
    assert recovered, f"the service did not answer 200 again after the database came back: {load.statuses}"
    assert load.statuses[200] > during.get(200, 0), "no successful request after the recovery"
    assert after_ready.status_code == 200 and after_ready.json()["status"] == "ok"
    assert "parley_db_unavailable_total" in metrics


async def test_unreachable_database_at_connect_is_503_fast(pg_url: str, tmp_path: Path) -> None:
    """A database address that refuses connections: 503 + Retry-After on a request, never a 500."""
    parts = urlsplit(pg_url)
    with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        url = pg_url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}", 1)
        settings = Settings(
            data_dir=tmp_path / "data",
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            db_connect_timeout=1,
            log_level="ERROR",
            log_json=False,
        )
        with serve_in_thread(create_app(settings)) as base_url:
            proxy.cut()
            response: Any = httpx.post(
                f"{base_url}/api/organizations",
                json={"name": "x"},
                headers=auth(make_token("ops-x")),
                timeout=30,
            )
            proxy.restore()
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json()["code"] == "service_unavailable"
