"""Background jobs: named handlers, and an in-process runner for the embedded default.

A job is a name and a small JSON-able payload (ids, never rows). Handlers are plain coroutines
``async def handler(ctx: JobContext, payload: dict) -> None`` registered by name; they read and write
through their unit of work, ``ctx.unit()`` (the one commit path of the platform). They know nothing about the queue, so a
Redis-backed queue (taskiq, arq) can later run the same handlers from ``registry``.

Durable state lives in the domain rows (e.g. a knowledge document's ``status``), not in the queue:
each handler name may have a *recovery* query that lists the payloads of unfinished work, and the
runner re-enqueues them when it starts, so nothing is lost across a restart. Handlers must therefore
be idempotent (skip work that is already done).

Requests enqueue with :func:`enqueue_after_commit`: the job is queued only once the request's
transaction has committed, so a job never sees uncommitted (or rolled back) rows.

Where jobs run is a :class:`JobQueue`: :class:`JobRunner` (in this process, the embedded default) or,
with ``PARLEY_REDIS_URL``, :class:`parley.kit.queue.RedisJobQueue` (an arq queue in Redis, worked by
``parley worker`` processes). Both run the same handlers from the same registry through
:func:`run_job`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import Counter, Gauge
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import State

from parley.kit.db import Database, after_commit, unit_of_work

log = structlog.get_logger("parley.jobs")

JOBS_PROCESSED = Counter("parley_jobs_processed_total", "Background jobs run to the end", ["job"])
JOBS_FAILED = Counter(
    "parley_jobs_failed_total", "Background jobs that failed (after their last try)", ["job"]
)
QUEUE_DEPTH = Gauge("parley_job_queue_depth", "Jobs waiting in the queue (not yet started)")
QUEUE_OLDEST_AGE = Gauge(
    "parley_job_queue_oldest_age_seconds", "How long the oldest waiting job has been due (0 when none)"
)

Payload = dict[str, Any]


@dataclass(frozen=True)
class JobContext:
    """What a handler gets besides its payload: the database and the app's state (settings, blobs)."""

    db: Database
    state: State

    @property
    def blobs(self) -> Any:
        return self.state.blobs

    def unit(self, *, write: bool = True) -> AbstractAsyncContextManager[AsyncSession]:
        """The handler's unit of work: commits (with its hooks) when the block ends, rolls back on error;
        jobs it enqueues after commit go to this process's queue. ``write=False`` only reads."""
        return unit_of_work(self.db, write=write, jobs=runner_for(self.state))

    @property
    def settings(self) -> Any:
        return self.state.settings


JobHandler = Callable[[JobContext, Payload], Awaitable[None]]
Recovery = Callable[[AsyncSession], Awaitable[list[Payload]]]


@dataclass
class JobRegistry:
    handlers: dict[str, JobHandler] = field(default_factory=dict)
    recoveries: dict[str, Recovery] = field(default_factory=dict)

    def register(self, name: str, handler: JobHandler, *, recover: Recovery | None = None) -> None:
        if name in self.handlers and self.handlers[name] is not handler:
            raise ValueError(f"a job handler named {name!r} is already registered")
        self.handlers[name] = handler
        if recover is not None:
            self.recoveries[name] = recover

    def handler(self, name: str, *, recover: Recovery | None = None) -> Callable[[JobHandler], JobHandler]:
        def decorate(fn: JobHandler) -> JobHandler:
            self.register(name, fn, recover=recover)
            return fn

        return decorate


registry = JobRegistry()
"""The process-wide registry; domain ``tasks`` modules register their handlers here at import."""


class JobQueue(ABC):
    """Where jobs go: the interface shared by the in-process runner and the Redis queue."""

    context: JobContext
    jobs: JobRegistry

    @property
    @abstractmethod
    def started(self) -> bool:
        """True once the background work runs."""

    @abstractmethod
    def start(self) -> None:
        """Start background work (idempotent). Needs a running event loop."""

    @abstractmethod
    def enqueue(self, name: str, payload: Payload) -> None:
        """Queue a job without waiting (the Redis queue sends it in the background)."""

    async def submit(self, name: str, payload: Payload) -> None:
        """Queue a job and wait until it is queued (stored in Redis, for the Redis queue)."""
        self.enqueue(name, payload)

    def enqueue_later(self, name: str, payload: Payload, delay: float) -> None:
        """Queue a job to run after ``delay`` seconds. In process the wait lives in this process's loop
        (recovery queries cover a restart); the Redis queue stores the delay with the job."""
        if delay <= 0:
            self.enqueue(name, payload)
            return
        self._check(name)
        asyncio.get_running_loop().call_later(delay, self.enqueue, name, payload)

    @abstractmethod
    async def recover(self) -> int:
        """Re-enqueue unfinished work found by the registered recovery queries; returns how many."""

    @abstractmethod
    async def drain(self, seconds: float = 30.0) -> None:
        """Run or wait for what is queued, at most ``seconds`` (tests and shutdown)."""

    @abstractmethod
    async def stop(self, grace: float = 10.0) -> None:
        """Stop taking jobs; let running ones finish within ``grace`` seconds."""

    @abstractmethod
    async def depth(self) -> tuple[int, float]:
        """Jobs waiting and the age in seconds of the oldest one (for the queue gauges)."""

    def _check(self, name: str) -> None:
        if name not in self.jobs.handlers:
            raise KeyError(f"no job handler is registered under {name!r}")

    async def _recovered_payloads(self) -> list[tuple[str, Payload]]:
        found: list[tuple[str, Payload]] = []
        for name, query in self.jobs.recoveries.items():
            try:
                async with self.context.db.sessionmaker() as session:  # a read, never committed
                    payloads = await query(session)
            except Exception as exc:  # e.g. the database is down at start-up: /readyz reports that
                log.warning("jobs_recovery_failed", job=name, error_type=type(exc).__name__)
                continue
            found.extend((name, payload) for payload in payloads)
        return found


class JobRunner(JobQueue):
    """An asyncio queue worked by a few tasks in the server process (the embedded default).

    With ``workers=0`` nothing runs in the background: queued jobs run one after another when
    :meth:`drain` is awaited. Apps whose database is one shared connection (the test suite's
    rollback-per-test set-up) use that mode, since a job's session must not interleave with a
    request's on the same connection.
    """

    def __init__(self, context: JobContext, *, jobs: JobRegistry = registry, workers: int = 2) -> None:
        self.context = context
        self.jobs = jobs
        self.workers = workers
        self._queue: asyncio.Queue[tuple[str, Payload, float]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._unfinished = 0  # queued + running
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Start the worker tasks (idempotent; none with ``workers=0``). Needs a running event loop."""
        if self._tasks or self.workers == 0:
            return
        self._stopping = False
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._work(), name=f"parley-job-{i}") for i in range(self.workers)]

    async def recover(self) -> int:
        found = await self._recovered_payloads()
        for name, payload in found:
            self.enqueue(name, payload)
        if found:
            log.info("jobs_recovered", count=len(found))
        return len(found)

    def enqueue(self, name: str, payload: Payload) -> None:
        self._check(name)
        if self.workers > 0:
            self.start()
        self._unfinished += 1
        self._idle.clear()
        self._queue.put_nowait((name, dict(payload), time.monotonic()))
        self._set_gauges()

    def _set_gauges(self) -> None:
        # In process the gauges follow the queue as it changes (the Redis queue polls Redis instead).
        waiting = self._queue._queue  # type: ignore[attr-defined]  # asyncio.Queue's deque
        QUEUE_DEPTH.set(len(waiting))
        QUEUE_OLDEST_AGE.set(max(0.0, time.monotonic() - waiting[0][2]) if waiting else 0.0)

    async def depth(self) -> tuple[int, float]:
        waiting = list(self._queue._queue)  # type: ignore[attr-defined]  # asyncio.Queue's deque
        oldest = min((queued for _, _, queued in waiting), default=None)
        return len(waiting), 0.0 if oldest is None else max(0.0, time.monotonic() - oldest)

    async def drain(self, seconds: float = 30.0) -> None:
        """Wait until every queued job has run (tests, graceful shutdown); TimeoutError after ``seconds``."""
        async with asyncio.timeout(seconds):
            if self.workers == 0:
                while not self._queue.empty():
                    name, payload, _ = self._queue.get_nowait()
                    self._set_gauges()
                    try:
                        await run_job(self.context, name, payload, self.jobs)
                    finally:
                        self._done()
            await self._idle.wait()

    async def stop(self, grace: float = 10.0) -> None:
        """Drop queued jobs, let running ones finish (up to ``grace`` seconds), then end the workers.

        Dropped jobs lose nothing: their rows are still unfinished, so the next start recovers them.
        """
        self._stopping = True
        while not self._queue.empty():
            self._queue.get_nowait()
            self._done()
        with contextlib.suppress(TimeoutError):
            await self.drain(grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def _done(self) -> None:
        self._unfinished -= 1
        if self._unfinished <= 0:
            self._unfinished = 0
            self._idle.set()

    async def _work(self) -> None:
        while True:
            name, payload, _ = await self._queue.get()
            self._set_gauges()
            try:
                if not self._stopping:
                    await run_job(self.context, name, payload, self.jobs)
            finally:
                self._done()


async def run_job(
    context: JobContext,
    name: str,
    payload: Payload,
    jobs: JobRegistry = registry,
    *,
    retry_if: Callable[[BaseException], bool] | None = None,
) -> None:
    """Run one job; failures are logged by type and never escape (handlers record their own failures).

    ``retry_if`` (the Redis queue) lets an error it wants to retry escape instead; it is counted as
    failed only when it is not retried.
    """
    handler = jobs.handlers[name]
    try:
        await handler(context, payload)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if retry_if is not None and retry_if(exc):
            raise
        JOBS_FAILED.labels(name).inc()
        log.error("job_failed", job=name, error_type=type(exc).__name__, exc_info=exc)
        return
    JOBS_PROCESSED.labels(name).inc()


def runner_for(state: State) -> JobQueue:
    """The app's job queue (``app.state.jobs``); an in-process runner when the lifespan did not run."""
    runner: JobQueue | None = getattr(state, "jobs", None)
    if runner is None:
        runner = JobRunner(JobContext(db=state.db, state=state))
        state.jobs = runner
    return runner


async def update_queue_gauges(queue: JobQueue) -> None:
    """Set the queue depth and oldest-job-age gauges from ``queue`` (errors leave them unchanged)."""
    try:
        waiting, oldest = await queue.depth()
    except Exception as exc:  # Redis down: keep the last values, the health check reports the outage
        log.debug("job_queue_depth_unavailable", error_type=type(exc).__name__)
        return
    QUEUE_DEPTH.set(waiting)
    QUEUE_OLDEST_AGE.set(oldest)


def enqueue_after_commit(session: AsyncSession, jobs: JobQueue | State, name: str, payload: Payload) -> None:
    """Queue the job once the request's transaction has committed (never for a rolled-back one).

    ``jobs`` is the queue itself (what services are handed) or the app's state (HTTP glue).
    """
    runner = jobs if isinstance(jobs, JobQueue) else runner_for(jobs)

    async def enqueue() -> None:
        await runner.submit(name, payload)

    after_commit(session, enqueue)
