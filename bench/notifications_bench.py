"""Notification figures: test-send latency to a local receiver, record_call cost with and without rules.

Run: PYTHONPATH=src:. python bench/notifications_bench.py
"""

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from tests.calls.helpers import flow_signal, make_record
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread

from parley.app import create_app
from parley.calls.service import record_call
from parley.config import Settings
from parley.kit.db import Database
from parley.kit.jobs import runner_for
from parley.kit.migrate import upgrade


async def ok(request):
    await request.body()
    return PlainTextResponse("ok")


async def main() -> None:
    tmp, url = TMP, URL
    db = Database.from_url(url)
    settings = Settings(
        data_dir=tmp,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,
        outbound_allowlist=["127.0.0.1"],
        log_level="WARNING",
        rate_limit_per_minute=0,
    )
    app = create_app(settings, database=db)
    with serve_in_thread(Starlette(routes=[Route("/hook", ok, methods=["POST"])])) as rurl:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            tok = make_token("bench")
            org = (
                await c.post(
                    "/api/organizations", json={"name": "B"}, headers={"Authorization": f"Bearer {tok}"}
                )
            ).json()["id"]
            h = {"Authorization": f"Bearer {tok}", "X-Organization-Id": org}
            ch = (
                await c.post(
                    "/api/notifications/channels",
                    json={"name": "h", "type": "webhook", "url": f"{rurl}/hook", "secret": "s3cret"},
                    headers=h,
                )
            ).json()
            lat = []
            for _ in range(40):
                t = time.perf_counter()
                r = await c.post("/api/notifications/test", json={"channel_id": ch["id"]}, headers=h)
                assert r.status_code == 200, r.text
                lat.append((time.perf_counter() - t) * 1000)
            print(
                f"POST /api/notifications/test (webhook, local receiver): median {statistics.median(lat):.1f} ms, p90 {sorted(lat)[35]:.1f} ms over 40"
            )
            runner = runner_for(app.state)

            async def rec(n: int) -> list[float]:
                out = []
                for _ in range(n):
                    t = time.perf_counter()
                    async with db.write_sessionmaker() as s:
                        await record_call(
                            s, make_record(org, signals=[flow_signal("complaint", "high")]), jobs=runner
                        )
                        await s.commit()
                        for cb in s.info.pop("after_commit", []):
                            await cb()
                    out.append((time.perf_counter() - t) * 1000)
                return out

            base = await rec(30)
            print(f"record_call with 1 signal, no rules: median {statistics.median(base):.1f} ms")
            for _ in range(2):
                await c.post(
                    "/api/notifications/rules", json={"signal_type": "*", "channel_id": ch["id"]}, headers=h
                )
            ruled = await rec(30)
            print(
                f"record_call with 1 signal, 2 matching rules: median {statistics.median(ruled):.1f} ms (deliveries queued, not sent)"
            )
            t = time.perf_counter()
            await runner.drain(120)
            print(f"drained 60 queued webhook deliveries in {(time.perf_counter() - t):.2f} s")
    await db.dispose()


TMP = Path(tempfile.mkdtemp())
URL = f"sqlite+aiosqlite:///{TMP / 'b.db'}"
upgrade(URL)
asyncio.run(main())
