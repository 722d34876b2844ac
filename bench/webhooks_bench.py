"""Call-event figures on the embedded default (SQLite, the in-process job runner):

1. delivery latency after call end: from the commit of ``record_call`` (the unit of work that stores the
   call and its ``call.ended`` event) to the local receiver having the signed request, beside the floor
   of one signed POST of the same size sent directly (no database, no queue);
2. 10,000 queued deliveries drained: wall time, deliveries per second, and the process RSS before
   queueing, at its peak while draining, and after.

Run: PYTHONPATH=src:. python bench/webhooks_bench.py [calls=200] [deliveries=10000]
     PYTHONPATH=src:. python bench/webhooks_bench.py --distributed [calls=100]

``--distributed`` measures (1) in distributed mode instead: the call is stored by this process with the
Redis queue (``PARLEY_REDIS_URL``, database 9, a key prefix of its own) and delivered by a ``parley
worker`` subprocess (4 concurrent jobs) over the same SQLite file.

The receiver runs in a thread of this process (uvicorn), so it shares the GIL with the platform: the
figures are an upper bound for a receiver elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from tests.calls.helpers import make_record
from tests.live import serve_in_thread

from parley.calls.service import record_call
from parley.config import Settings
from parley.kit.db import Database, unit_of_work
from parley.kit.jobs import JobContext, JobRunner
from parley.kit.logging import configure_logging
from parley.kit.migrate import upgrade
from parley.webhooks import service, tasks
from parley.webhooks.models import WebhookEvent, WebhookSubscription

assert tasks  # registers webhooks.deliver

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


class Receiver:
    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.count = 0
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}

    def expect(self, key: str) -> threading.Event:
        with self.lock:
            event = self.events[key] = threading.Event()
        return event

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        now = time.perf_counter()
        key = (
            request.headers.get("x-parley-event", "") + ":" + str(json.loads(body)["data"].get("session_id"))
        )
        with self.lock:
            self.count += 1
            self.arrived[key] = now
            waiting = self.events.pop(key, None)
        if waiting is not None:
            waiting.set()
        return PlainTextResponse("ok")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(tmp: Path, url: str, calls: int, deliveries: int) -> None:
    configure_logging("WARNING", json=True)
    settings = Settings(
        data_dir=tmp,
        database_url=url,
        outbound_allowlist=["127.0.0.1"],
        log_level="WARNING",
        secret_key="A" * 43 + "=",
    )
    db = Database.from_url(url)
    from starlette.datastructures import State

    state = State()
    state.settings, state.db = settings, db
    runner = JobRunner(JobContext(db=db, state=state), workers=2)
    state.jobs = runner
    receiver = Receiver()
    app = Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])
    org = "org_bench"
    with serve_in_thread(app) as base:
        async with unit_of_work(db, write=True) as session:
            subscription = WebhookSubscription(
                id="whs_bench",
                organization_id=org,
                url=f"{base}/hook",
                event_types=["call.ended", "campaign.contact.completed"],
                active=True,
                secret="",
                secret_hint="",
            )
            service._seal(settings, subscription, "bench-secret-0123456789")
            session.add(subscription)

        # 1. call end → received ------------------------------------------------------------------
        # Interleaved with the floor (one signed POST each turn) so both see the same machine load.
        floor: list[float] = []
        sample = make_record(org, session_id="ses_floor")
        body = orjson.dumps(
            {"type": "call.ended", "data": {"session_id": "floor", **sample.model_dump(mode="json")}}
        )
        latencies: list[float] = []
        for i in range(calls):
            t = time.perf_counter()
            result = await service.post(
                settings,
                f"{base}/hook",
                "bench-secret-0123456789",
                body,
                delivery_id="whd_x",
                event_type="call.ended",
            )
            assert result.outcome == "delivered", result
            floor.append((time.perf_counter() - t) * 1000)
            session_id = f"ses_bench_{i}"
            arrived = receiver.expect(f"call.ended:{session_id}")
            async with unit_of_work(db, write=True, jobs=runner) as session:
                await record_call(session, make_record(org, session_id=session_id), jobs=runner)
                committed_at = time.perf_counter()  # the after-commit hooks run after this block's commit
            t0 = committed_at
            while not arrived.is_set():
                await asyncio.sleep(0.0005)
            latencies.append((receiver.arrived[f"call.ended:{session_id}"] - t0) * 1000)
        await runner.drain(60)
        print(
            f"call.ended delivered after the call is stored, {calls} calls one at a time (SQLite, in-process runner):"
        )
        print(f"  p50 {statistics.median(latencies):.1f} ms, p95 {pct(latencies, 0.95):.1f} ms")
        print(
            f"  floor: one signed POST of the same payload straight to the receiver: p50 {statistics.median(floor):.1f} ms, "
            f"p95 {pct(floor, 0.95):.1f} ms"
        )

        # 2. 10,000 queued deliveries ---------------------------------------------------------------
        if deliveries:
            await drain_many(state, db, runner, receiver, org, deliveries)
    await runner.stop()
    await db.dispose()


async def drain_many(
    state: Any, db: Database, runner: JobRunner, receiver: Receiver, org: str, deliveries: int
) -> None:
    ids: list[str] = []
    parked = JobRunner(JobContext(db=db, state=state), workers=0)  # holds the jobs; never run
    before_publish = rss_mb()
    for start in range(0, deliveries, 500):
        async with unit_of_work(db, write=True) as session:  # no queue: stored pending
            for n in range(start, min(deliveries, start + 500)):
                ids += await service.publish_event(
                    session,
                    org,
                    "campaign.contact.completed",
                    {
                        "session_id": f"c{n}",
                        "campaign_id": "cmp_bench",
                        "contact_id": f"cct_{n}",
                        "status": "completed",
                    },
                    jobs=parked,
                )
    del parked  # its queue (the same jobs) is dropped: the real runner gets them all at once below
    received_before = receiver.count
    rss_start = rss_mb()
    peak = rss_start
    t = time.perf_counter()
    for delivery_id in ids:
        runner.enqueue(service.DELIVER_JOB, {"delivery_id": delivery_id})
    drained = asyncio.create_task(runner.drain(3600))
    samples = []
    while not drained.done():
        now = rss_mb()
        peak = max(peak, now)
        samples.append(now)
        await asyncio.sleep(0.25)
    await drained
    took = time.perf_counter() - t
    rss_end = rss_mb()
    got = receiver.count - received_before
    async with unit_of_work(db, write=False) as session:
        from sqlalchemy import func, select

        from parley.webhooks.models import WebhookDelivery

        delivered = await session.scalar(
            select(func.count()).select_from(WebhookDelivery).where(WebhookDelivery.status == "delivered")
        )
        events = await session.scalar(select(func.count()).select_from(WebhookEvent))
    print(f"{deliveries} queued deliveries drained by the in-process runner (2 workers, SQLite):")
    print(
        f"  {took:.1f} s, {got / took:.0f} deliveries/s; received {got}, delivered rows {delivered}, events {events}"
    )
    print(
        f"  RSS before publishing {before_publish:.0f} MB, when queued {rss_start:.0f} MB, peak while draining {peak:.0f} MB, "
        f"after {rss_end:.0f} MB (first/last quarter of the drain: {statistics.median(samples[: max(1, len(samples) // 4)]):.0f} / "
        f"{statistics.median(samples[-max(1, len(samples) // 4) :]):.0f} MB)"
    )
    print(f"  max RSS of the process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


async def distributed(tmp: Path, url: str, calls: int) -> None:
    import subprocess
    import uuid

    from parley.kit.queue import RedisJobQueue

    configure_logging("WARNING", json=True)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PARLEY_DATA_DIR": str(tmp),
        "PARLEY_DATABASE_URL": url,
        "PARLEY_REDIS_URL": "redis://127.0.0.1:6379/9",
        "PARLEY_REDIS_PREFIX": prefix,
        "PARLEY_SECRET_KEY": "A" * 43 + "=",
        "PARLEY_OUTBOUND_ALLOWLIST": "127.0.0.1",
        "PARLEY_LOG_LEVEL": "WARNING",
    }
    settings = Settings(
        data_dir=tmp,
        database_url=url,
        redis_url=env["PARLEY_REDIS_URL"],
        redis_prefix=prefix,
        outbound_allowlist=["127.0.0.1"],
        log_level="WARNING",
        secret_key=env["PARLEY_SECRET_KEY"],
    )
    db = Database.from_url(url)
    from starlette.datastructures import State

    state = State()
    state.settings, state.db = settings, db
    queue = RedisJobQueue(JobContext(db=db, state=state), settings)
    state.jobs = queue
    receiver = Receiver()
    org = "org_bench"
    parley = Path(sys.executable).parent / "parley"
    worker = subprocess.Popen([str(parley), "worker", "--concurrency", "4"], env=env)
    try:
        with serve_in_thread(Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])) as base:
            async with unit_of_work(db, write=True) as session:
                subscription = WebhookSubscription(
                    id="whs_bench",
                    organization_id=org,
                    url=f"{base}/hook",
                    event_types=["call.ended"],
                    active=True,
                    secret="",
                    secret_hint="",
                )
                service._seal(settings, subscription, "bench-secret-0123456789")
                session.add(subscription)
            latencies: list[float] = []
            for i in range(-3, calls):  # three warm-up calls: the worker starts and connects
                session_id = f"ses_dist_{i}"
                arrived = receiver.expect(f"call.ended:{session_id}")
                async with unit_of_work(db, write=True, jobs=queue) as session:
                    await record_call(session, make_record(org, session_id=session_id), jobs=queue)
                    committed_at = time.perf_counter()
                deadline = time.monotonic() + 120
                while not arrived.is_set():
                    assert time.monotonic() < deadline, "the worker did not deliver"
                    await asyncio.sleep(0.0005)
                if i >= 0:
                    latencies.append((receiver.arrived[f"call.ended:{session_id}"] - committed_at) * 1000)
            print(
                f"distributed mode (Redis queue, `parley worker --concurrency 4`, SQLite file): call.ended delivered "
                f"after the call is stored, {calls} calls one at a time: p50 {statistics.median(latencies):.1f} ms, "
                f"p95 {pct(latencies, 0.95):.1f} ms"
            )
    finally:
        worker.terminate()
        worker.wait(60)
        await queue.stop()
        await db.dispose()
        import redis

        client = redis.Redis.from_url("redis://127.0.0.1:6379/9")
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)


if __name__ == "__main__":
    dist = "--distributed" in sys.argv
    args = [int(a) for a in sys.argv[1:] if a != "--distributed"]
    TMP = Path(tempfile.mkdtemp())
    URL = f"sqlite+aiosqlite:///{TMP / 'bench.db'}"
    upgrade(URL)
    if dist:
        asyncio.run(distributed(TMP, URL, args[0] if args else 100))
    else:
        asyncio.run(main(TMP, URL, args[0] if args else 200, args[1] if len(args) > 1 else 10_000))
