"""The Redis job queue (arq) with the worker in this process: same handlers, retries, graceful stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from starlette.datastructures import State

from parley.config import Settings
from parley.kit.db import Database
from parley.kit.jobs import (
    JobContext,
    JobRegistry,
    JobRunner,
    Payload,
    update_queue_gauges,
)
from parley.kit.orgcache import LONG_TTL, SHORT_TTL, org_cache_of_database
from parley.kit.queue import QueueWorker, RedisJobQueue, queue_from_settings, run_worker
from tests.distributed.redis_env import REDIS_URL, keys_of


def _settings(tmp_path: Path, prefix: str) -> Settings:
    return Settings(data_dir=tmp_path, redis_url=REDIS_URL, redis_prefix=prefix, job_max_tries=3)


def _context() -> JobContext:
    # These handlers never touch the database.
    return JobContext(db=cast(Database, None), state=State())


class Recorder:
    def __init__(self) -> None:
        self.done: list[Payload] = []
        self.tries: dict[str, int] = {}
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.jobs = JobRegistry()
        self.jobs.register("test.record", self.record)
        self.jobs.register("test.flaky", self.flaky)
        self.jobs.register("test.broken", self.broken)
        self.jobs.register("test.slow", self.slow)

    async def record(self, ctx: JobContext, payload: Payload) -> None:
        self.done.append(payload)

    async def flaky(self, ctx: JobContext, payload: Payload) -> None:
        key = str(payload["n"])
        self.tries[key] = self.tries.get(key, 0) + 1
        if self.tries[key] < 2:
            raise ConnectionRefusedError("the database is restarting")  # transient: retried later
        self.done.append(payload)

    async def broken(self, ctx: JobContext, payload: Payload) -> None:
        self.tries["broken"] = self.tries.get("broken", 0) + 1
        raise ValueError("a bug, not worth retrying")

    async def slow(self, ctx: JobContext, payload: Payload) -> None:
        self.started.set()
        await self.release.wait()
        self.done.append(payload)


async def until(check: Any, attempts: int = 300) -> None:
    """Poll ``check()`` (bounded by attempts, not by a deadline)."""
    for _ in range(attempts):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition was not met")


@pytest.fixture
async def setup(tmp_path: Path, redis_prefix: str) -> AsyncIterator[tuple[Settings, Recorder, RedisJobQueue]]:
    settings = _settings(tmp_path, redis_prefix)
    recorder = Recorder()
    queue = RedisJobQueue(_context(), settings, jobs=recorder.jobs)
    yield settings, recorder, queue
    await queue.stop()


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_jobs_enqueued_in_redis_run_on_a_worker(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    settings, recorder, queue = setup
    before = _metric("parley_jobs_processed_total", job="test.record")
    for n in range(3):
        await queue.submit("test.record", {"n": n})
    queue.enqueue("test.record", {"n": 3})  # the fire-and-forget form, stored by drain()
    await queue.drain()
    assert (await queue.depth())[0] == 4  # waiting: nothing runs in the API process
    await update_queue_gauges(queue)
    assert _metric("parley_job_queue_depth") == 4
    assert _metric("parley_job_queue_oldest_age_seconds") >= 0

    worker = QueueWorker(_context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: len(recorder.done) == 4)
    finally:
        worker.stop()
        await running
    assert sorted(p["n"] for p in recorder.done) == [0, 1, 2, 3]
    assert (await queue.depth()) == (0, 0.0)
    assert _metric("parley_jobs_processed_total", job="test.record") == before + 4


async def test_a_delayed_job_is_stored_now_and_due_later_for_any_worker(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    settings, recorder, queue = setup
    queued_at_ms = time.time() * 1000
    queue.enqueue_later("test.record", {"n": "later"}, 30.0)  # a notification retry, say
    queue.enqueue_later("test.record", {"n": "now"}, 0.0)
    await queue.drain()
    scores = sorted(score for _, score in await queue.redis.zrange(queue.queue, 0, -1, withscores=True))
    assert len(scores) == 2  # both in Redis already: a restart of this process loses neither
    assert scores[0] < queued_at_ms + 5_000 <= queued_at_ms + 29_000 <= scores[1]
    worker = QueueWorker(_context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: len(recorder.done) == 1)
    finally:
        worker.stop()
        await running
    assert recorder.done == [{"n": "now"}]  # the other is not due yet
    assert (await queue.depth())[0] == 1


async def test_unknown_job_names_are_refused_when_enqueued(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    _, _, queue = setup
    with pytest.raises(KeyError):
        await queue.submit("no.such.job", {})


async def test_transient_failures_are_retried_later_and_bugs_are_not(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    settings, recorder, queue = setup
    failed_before = _metric("parley_jobs_failed_total", job="test.broken")
    await queue.submit("test.flaky", {"n": 1})
    await queue.submit("test.broken", {})
    worker = QueueWorker(_context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: recorder.done == [{"n": 1}], attempts=600)  # the retry waits 2 s
    finally:
        worker.stop()
        await running
    assert recorder.tries == {"1": 2, "broken": 1}
    assert worker.worker.jobs_retried == 1
    assert _metric("parley_jobs_failed_total", job="test.broken") == failed_before + 1


async def test_stop_lets_running_jobs_finish_and_takes_no_new_ones(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    settings, recorder, queue = setup
    await queue.submit("test.slow", {"n": "slow"})
    worker = QueueWorker(
        _context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05, concurrency=1
    )
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(recorder.started.wait(), 15)
    worker.stop()  # what SIGTERM does
    await queue.submit("test.record", {"n": "after"})
    await asyncio.sleep(0.3)
    assert not running.done()  # still finishing the slow job
    recorder.release.set()
    await running
    assert recorder.done == [{"n": "slow"}]  # finished, not cancelled; the new job stays queued
    assert (await queue.depth())[0] == 1


async def test_a_job_cut_off_by_the_grace_period_goes_back_to_the_queue(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    settings, recorder, queue = setup
    await queue.submit("test.slow", {"n": "cut"})
    worker = QueueWorker(
        _context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05, grace=0
    )
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(recorder.started.wait(), 15)
    worker.stop()
    await running
    assert recorder.done == []
    # Cancelled by the shutdown: arq keeps it for the next worker, which runs it to the end.
    recorder.release.set()
    second = QueueWorker(_context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05)
    running = asyncio.create_task(second.run())
    try:
        await until(lambda: recorder.done == [{"n": "cut"}])
    finally:
        second.stop()
        await running


async def test_recovered_work_is_queued_once(tmp_path: Path, redis_prefix: str) -> None:
    settings = _settings(tmp_path, redis_prefix)
    recorder = Recorder()

    async def unfinished(session: Any) -> list[Payload]:
        return [{"n": "left over"}]

    recorder.jobs.register("test.recovered", recorder.record, recover=unfinished)

    # The recovery query reads through the unit of work: a real (empty) database, as at start-up.
    database = Database.from_settings(settings)
    context = JobContext(db=database, state=State())
    first, second = (RedisJobQueue(context, settings, jobs=recorder.jobs) for _ in range(2))
    context.state.jobs = first  # as the app's lifespan sets it
    try:
        assert await first.recover() == 1
        assert await second.recover() == 0  # another process's pass: already queued
        assert (await first.depth())[0] == 1
    finally:
        await first.stop()
        await second.stop()
        await database.dispose()


def test_the_queue_follows_the_settings(tmp_path: Path, redis_prefix: str) -> None:
    assert isinstance(queue_from_settings(_context(), Settings(data_dir=tmp_path)), JobRunner)
    assert isinstance(queue_from_settings(_context(), _settings(tmp_path, redis_prefix)), RedisJobQueue)


async def test_keys_stay_under_the_prefix(setup: tuple[Settings, Recorder, RedisJobQueue]) -> None:
    settings, _, queue = setup
    await queue.submit("test.record", {"n": 1})
    names = [k.decode() for k in keys_of(settings.redis_prefix)]
    assert names and all(settings.redis_prefix in name for name in names)


async def test_the_in_process_runner_reports_the_same_metrics() -> None:
    recorder = Recorder()
    runner = JobRunner(_context(), jobs=recorder.jobs, workers=0)
    before = _metric("parley_jobs_processed_total", job="test.record")
    runner.enqueue("test.record", {"n": 1})
    await runner.submit("test.record", {"n": 2})
    assert _metric("parley_job_queue_depth") == 2
    assert (await runner.depth())[0] == 2
    await runner.drain()
    assert recorder.done == [{"n": 1}, {"n": 2}]
    assert _metric("parley_jobs_processed_total", job="test.record") == before + 2


async def test_the_job_of_a_crashed_worker_runs_again_elsewhere(
    setup: tuple[Settings, Recorder, RedisJobQueue],
) -> None:
    """A worker killed mid-job leaves the job queued with an in-progress mark that expires."""
    settings, recorder, queue = setup
    await queue.submit("test.record", {"n": "orphan"})
    job_id = (await queue.redis.zrange(queue.queue, 0, 0))[0].decode()
    # What a crashed worker leaves behind: the mark it set when it took the job (here 0.3 s left).
    await queue.redis.set(f"arq:in-progress:{job_id}", b"1", px=300)
    worker = QueueWorker(_context(), settings, jobs=recorder.jobs, handle_signals=False, poll_delay=0.05)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: recorder.done == [{"n": "orphan"}])
    finally:
        worker.stop()
        await running


async def test_the_worker_process_applies_configuration_changes_from_redis(
    tmp_path: Path, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``parley worker`` subscribes to the configuration cache's channel (kit/orgcache.py) while it runs,
    so what its jobs read there lives 30 s and is dropped when another process changes it."""
    seen: dict[str, Any] = {}

    async def run(worker: QueueWorker) -> None:  # instead of working the queue
        cache = org_cache_of_database(worker.context.db, distributed=True)
        assert cache.bus is not None
        await asyncio.wait_for(cache.bus.subscribed_event.wait(), 10)
        seen.update(cache=cache, ttl=cache.ttl, channel=cache.bus.channel)

    monkeypatch.setattr(QueueWorker, "run", run)
    await run_worker(_settings(tmp_path, redis_prefix), concurrency=1, grace=1)
    assert seen["ttl"] == LONG_TTL and seen["channel"] == f"{redis_prefix}:org_config"
    assert seen["cache"].bus is None and seen["cache"].ttl == SHORT_TTL  # stopped with the worker
