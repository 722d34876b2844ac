"""What distributed mode costs: a rate-limit check in Redis, and a job's trip through the Redis queue.

Run against a local Redis (a key prefix of its own, deleted afterwards)::

    PYTHONPATH=src python -m bench.distributed_bench [redis://127.0.0.1:6379/9]

Prints the in-process and Redis limiter's checks per second (one client, sequential and 32 at a
time), and the enqueue → handler-start latency of jobs through arq with a worker in this process
(median and 95th percentile over 200 jobs, one at a time).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import redis
from starlette.datastructures import State

from parley.config import Settings
from parley.kit.db import Database
from parley.kit.jobs import JobContext, JobRegistry
from parley.kit.queue import QueueWorker, RedisJobQueue
from parley.kit.ratelimit import RateLimiter, SlidingWindowLimiter, limiter_from_settings


async def _checks_per_second(limiter: RateLimiter, n: int, parallel: int) -> float:
    async def one(i: int) -> None:
        for j in range(n // parallel):
            await limiter.check(f"user:{(i * 7919 + j) % 500}")

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(parallel)))
    return n / (time.perf_counter() - started)


async def _job_latency(settings: Settings, count: int) -> list[float]:
    started: dict[str, float] = {}
    arrived = asyncio.Event()
    latencies: list[float] = []
    jobs = JobRegistry()

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        latencies.append(time.perf_counter() - started[payload["id"]])
        arrived.set()

    jobs.register("bench.noop", handler)
    context = JobContext(db=cast(Database, None), state=State())
    queue = RedisJobQueue(context, settings, jobs=jobs)
    worker = QueueWorker(context, settings, jobs=jobs, handle_signals=False)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(count):
            job_id = uuid.uuid4().hex
            arrived.clear()
            started[job_id] = time.perf_counter()
            await queue.submit("bench.noop", {"id": job_id})
            await asyncio.wait_for(arrived.wait(), 30)
    finally:
        worker.stop()
        await running
        await queue.stop()
    return latencies


async def main(url: str) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        data_dir=Path(tempfile.mkdtemp()), redis_url=url, redis_prefix=prefix, rate_limit_per_minute=10**9
    )
    try:
        memory = SlidingWindowLimiter(10**9)
        shared = limiter_from_settings(settings)
        for name, limiter in (("in-process", memory), ("redis", shared)):
            for parallel in (1, 32):
                rate = await _checks_per_second(limiter, 4000, parallel)
                print(f"rate limit {name:10} parallel={parallel:2}: {rate:9.0f} checks/s")
        await shared.aclose()
        latencies = sorted(await _job_latency(settings, 200))
        p50 = statistics.median(latencies) * 1000
        p95 = latencies[int(len(latencies) * 0.95)] * 1000
        print(f"job enqueue -> handler start (poll delay 0.2 s): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    finally:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"*{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/9"))
