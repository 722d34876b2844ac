"""Benchmark: the OAuth2 integration flow over loopback HTTP.

The platform (one uvicorn server in a thread, SQLite in a temporary directory) and the local OAuth2
server of the tests (``tests/stubs/oauth2.py``) run in this process. Measured per flow:
``connect`` (POST .../connect), ``callback`` (GET .../oauth/callback, which includes the code exchange
at the token endpoint) and ``refresh`` (POST .../connections/{id}/refresh, one refresh grant).

    .venv/bin/python bench/oauth_bench.py [--flows 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.conftest import JWT_SECRET, auth, make_token  # noqa: E402
from tests.live import free_port, serve_in_thread  # noqa: E402
from tests.stubs.oauth2 import OAuth2Stub, StubClient, build_app  # noqa: E402

from parley.app import create_app  # noqa: E402
from parley.config import Settings  # noqa: E402
from parley.kit.migrate import upgrade  # noqa: E402


def _summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return f"{name:9s} n={len(values)} p50={statistics.median(values):.1f} ms p95={p95:.1f} ms max={ordered[-1]:.1f} ms"


async def run(flows: int, base: str, stub_url: str) -> None:
    token = make_token("bench", ttl=3600)
    timings: dict[str, list[float]] = {"connect": [], "callback": [], "refresh": []}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http, httpx.AsyncClient() as browser:
        for i in range(flows):
            org = (
                await http.post("/api/organizations", json={"name": f"Bench {i}"}, headers=auth(token))
            ).json()
            headers = auth(token, org["id"])
            body = {
                "client_id": "bench-client",
                "client_secret": "bench-secret-value",
                "authorize_url": f"{stub_url}/authorize",
                "token_url": f"{stub_url}/token",
                "scopes": ["read"],
            }
            assert (
                await http.put("/api/integrations/acme/client", json=body, headers=headers)
            ).status_code == 200
            started = time.perf_counter()
            connect = await http.post("/api/integrations/acme/connect", json={}, headers=headers)
            timings["connect"].append((time.perf_counter() - started) * 1000)
            location = (await browser.get(connect.json()["authorization_url"])).headers["location"]
            started = time.perf_counter()
            callback = await http.get(location[len(base) :])
            timings["callback"].append((time.perf_counter() - started) * 1000)
            assert callback.status_code == 200, callback.text
            started = time.perf_counter()
            refreshed = await http.post(
                f"/api/integrations/connections/{callback.json()['connection_id']}/refresh", headers=headers
            )
            timings["refresh"].append((time.perf_counter() - started) * 1000)
            assert refreshed.status_code == 200, refreshed.text
    for name, values in timings.items():
        print(_summary(name, values))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flows", type=int, default=100)
    args = parser.parse_args()
    stub = OAuth2Stub()
    stub.register(StubClient("bench-client", "bench-secret-value"))
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        upgrade(url)
        port = free_port()
        settings = Settings(
            data_dir=Path(tmp),
            database_url=url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            outbound_allowlist=["127.0.0.1"],
            public_url=f"http://127.0.0.1:{port}",
            rate_limit_per_minute=0,
            log_json=False,
            log_level="WARNING",
        )
        with (
            serve_in_thread(build_app(stub)) as stub_url,
            serve_in_thread(create_app(settings), port) as base,
        ):
            asyncio.run(run(args.flows, base, stub_url))


if __name__ == "__main__":
    main()
