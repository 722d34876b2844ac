"""The Redis-backed job queue of distributed mode (arq), and the ``parley worker`` that works it.

API processes put jobs in an arq queue in Redis (:class:`RedisJobQueue`); ``parley worker`` processes
(:class:`QueueWorker`) take them out and run the very handlers of :data:`parley.kit.jobs.registry`
through :func:`parley.kit.jobs.run_job`: one arq function, ``parley.job(name, payload)``, dispatches
to them, so handlers do not know which queue they run on.

Why arq: a job stays in Redis until it has succeeded or failed ("pessimistic execution"); a job
being run is marked with an in-progress key that expires, so the job of a worker that crashed (or was
killed) is picked up again by another worker; a job interrupted by a shutdown is put back at once;
``Retry(defer=...)`` gives delayed retries with a bounded number of tries; and ``job_completion_wait``
lets a worker finish its current jobs on SIGTERM without taking new ones.

Delivery is at least once, so handlers stay idempotent (they already are: recovery re-enqueues
unfinished work). The durable record is still the domain row: the worker runs the recovery queries at
start and every few minutes, so a job whose enqueue was lost (Redis down at the wrong moment) is done
later all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import time
import uuid
from typing import Any

import structlog
from arq import Retry
from arq.connections import ArqRedis
from arq.worker import Worker, func
from redis.asyncio import ConnectionPool
from redis.exceptions import RedisError
from sqlalchemy.exc import DBAPIError, OperationalError

from parley.config import Settings
from parley.kit.jobs import (
    JobContext,
    JobQueue,
    JobRegistry,
    JobRunner,
    Payload,
    registry,
    run_job,
    update_queue_gauges,
)
from parley.kit.orgcache import OrgBus, org_cache_of_database
from parley.kit.redis import COMMAND_TIMEOUT, CONNECT_TIMEOUT, key

log = structlog.get_logger("parley.jobs")

FUNCTION = "parley.job"
RECOVER_EVERY = 300.0  # seconds between the worker's recovery passes
GAUGES_EVERY = 15.0  # seconds between updates of the queue gauges
MAX_RETRY_DELAY = 60.0


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, default=repr).encode()


def _loads(raw: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw)
    return value


def queue_name(settings: Settings) -> str:
    return key(settings, "jobs")


def _arq_redis(settings: Settings) -> ArqRedis:
    assert settings.redis_url
    pool = ConnectionPool.from_url(
        settings.redis_url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=COMMAND_TIMEOUT
    )
    return ArqRedis(
        pool_or_conn=pool,
        job_serializer=_dumps,
        job_deserializer=_loads,
        default_queue_name=queue_name(settings),
    )


def transient(exc: BaseException) -> bool:
    """Errors worth another try later: the database or another service is unreachable or timed out."""
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or isinstance(exc, OperationalError)
    return isinstance(exc, (OSError, TimeoutError, RedisError))


async def queue_depth(redis: ArqRedis, name: str) -> tuple[int, float]:
    """Jobs in the arq queue (a sorted set scored by due time in ms) and the oldest due job's age."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zcard(name)
        pipe.zrange(name, 0, 0, withscores=True)
        count, first = await pipe.execute()
    if not first:
        return int(count), 0.0
    due_ms = float(first[0][1])
    return int(count), max(0.0, time.time() - due_ms / 1000)


class RedisJobQueue(JobQueue):
    """The API side: jobs go to Redis, ``parley worker`` runs them. Nothing runs in this process."""

    def __init__(self, context: JobContext, settings: Settings, *, jobs: JobRegistry = registry) -> None:
        self.context = context
        self.jobs = jobs
        self.settings = settings
        self.queue = queue_name(settings)
        self._redis: ArqRedis | None = None
        self._sending: set[asyncio.Task[bool]] = set()
        self._gauges: asyncio.Task[None] | None = None

    @property
    def redis(self) -> ArqRedis:
        if self._redis is None:
            self._redis = _arq_redis(self.settings)
        return self._redis

    @property
    def started(self) -> bool:
        return self._gauges is not None

    def start(self) -> None:
        if self._gauges is None:
            self._gauges = asyncio.get_running_loop().create_task(
                self._update_gauges(), name="parley-queue-gauges"
            )

    def _job_id(self, recovered: Payload | None = None, name: str = "") -> str:
        if recovered is None:
            return f"{self.settings.redis_prefix}:{uuid.uuid4().hex}"
        # Recovered work gets a stable id: passes of several processes queue it once (while queued).
        digest = hashlib.sha256(
            json.dumps([name, recovered], sort_keys=True, default=str).encode()
        ).hexdigest()
        return f"{self.settings.redis_prefix}:recover:{digest[:32]}"

    async def _send(self, name: str, payload: Payload, job_id: str, delay: float | None = None) -> bool:
        try:
            job = await self.redis.enqueue_job(
                FUNCTION,
                name,
                dict(payload),
                _job_id=job_id,
                _defer_by=delay if delay and delay > 0 else None,
            )
        except (RedisError, OSError, TimeoutError) as exc:
            # The row still says the work is unfinished: the worker's recovery pass queues it again.
            log.warning("job_enqueue_failed", job=name, error_type=type(exc).__name__)
            return False
        return job is not None

    async def submit(self, name: str, payload: Payload) -> None:
        self._check(name)
        await self._send(name, payload, self._job_id())

    def enqueue(self, name: str, payload: Payload) -> None:
        self.enqueue_later(name, payload, 0.0)

    def enqueue_later(self, name: str, payload: Payload, delay: float) -> None:
        """The job is stored in Redis now and becomes due after ``delay`` seconds (any worker runs it)."""
        self._check(name)
        task = asyncio.get_running_loop().create_task(self._send(name, payload, self._job_id(), delay))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def recover(self) -> int:
        count = 0
        for name, payload in await self._recovered_payloads():
            if await self._send(name, payload, self._job_id(payload, name)):
                count += 1
        if count:
            log.info("jobs_recovered", count=count)
        return count

    async def drain(self, seconds: float = 30.0) -> None:
        """Wait until the jobs handed to :meth:`enqueue` are stored in Redis (not until they have run)."""
        async with asyncio.timeout(seconds):
            while self._sending:
                await asyncio.gather(*list(self._sending), return_exceptions=True)

    async def depth(self) -> tuple[int, float]:
        return await queue_depth(self.redis, self.queue)

    async def stop(self, grace: float = 10.0) -> None:
        with contextlib.suppress(TimeoutError):
            await self.drain(grace)
        if self._gauges is not None:
            self._gauges.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._gauges
            self._gauges = None
        if self._redis is not None:
            await self._redis.aclose(close_connection_pool=True)
            self._redis = None

    async def _update_gauges(self) -> None:
        while True:
            await update_queue_gauges(self)
            await asyncio.sleep(GAUGES_EVERY)


async def _dispatch(ctx: dict[str, Any], name: str, payload: Payload) -> None:
    """The one arq function: run the named handler from the registry (retrying transient failures)."""
    context: JobContext = ctx["parley_context"]
    jobs: JobRegistry = ctx["parley_jobs"]
    max_tries: int = ctx["parley_max_tries"]
    if name not in jobs.handlers:
        log.error("job_unknown", job=name, detail="No handler is registered under this name in the worker.")
        return
    try_number = int(ctx.get("job_try") or 1)
    retry_if = transient if try_number < max_tries else None
    try:
        await run_job(context, name, payload, jobs, retry_if=retry_if)
    except Exception as exc:
        delay = min(2.0**try_number, MAX_RETRY_DELAY)
        log.warning("job_retry", job=name, attempt=try_number, delay_s=delay, error_type=type(exc).__name__)
        raise Retry(defer=delay) from exc


class QueueWorker:
    """``parley worker``: runs queued jobs with the registry's handlers until SIGTERM/SIGINT.

    On a signal it stops taking jobs, lets the running ones finish (up to ``grace`` seconds; what is
    still running then is put back in the queue for another worker) and exits.
    """

    def __init__(
        self,
        context: JobContext,
        settings: Settings,
        *,
        concurrency: int = 4,
        grace: int = 30,
        jobs: JobRegistry = registry,
        handle_signals: bool = True,
        poll_delay: float = 0.2,
        job_timeout: float = 300.0,
    ) -> None:
        self.context = context
        self.settings = settings
        self.jobs = jobs
        self.redis = _arq_redis(settings)
        self.queue = queue_name(settings)
        self.handle_signals = handle_signals
        self.worker = Worker(
            functions=[func(_dispatch, name=FUNCTION, keep_result=0)],
            queue_name=self.queue,
            redis_pool=self.redis,
            max_jobs=concurrency,
            job_timeout=job_timeout,
            keep_result=0,
            max_tries=settings.job_max_tries + 1,  # arq's own limit stays out of the way of ours
            poll_delay=poll_delay,
            handle_signals=False,  # installed on the running loop in run()
            job_completion_wait=grace,
            health_check_interval=30,
            health_check_key=key(settings, "worker-health"),
            job_serializer=_dumps,
            job_deserializer=_loads,
            log_results=False,
            ctx={"parley_context": context, "parley_jobs": jobs, "parley_max_tries": settings.job_max_tries},
        )
        self._background: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        """Work until a signal (or :meth:`close`); then close the Redis connections."""
        loop = asyncio.get_running_loop()
        self.worker.loop = loop  # arq captured the loop current at construction
        if self.handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.worker.handle_sig_wait_for_completion, sig)
        self._background = [
            loop.create_task(self._recover_now_and_then(), name="parley-job-recovery"),
            loop.create_task(self._update_gauges(), name="parley-queue-gauges"),
        ]
        log.info("worker_started", queue=self.queue, concurrency=self.worker.max_jobs)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self.worker.async_run()
        finally:
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            await asyncio.gather(*self.worker.tasks.values(), return_exceptions=True)
            with contextlib.suppress(RedisError, OSError):
                await self.redis.delete(self.worker.health_check_key)
            await self.redis.aclose(close_connection_pool=True)
            log.info(
                "worker_stopped",
                complete=self.worker.jobs_complete,
                failed=self.worker.jobs_failed,
                retried=self.worker.jobs_retried,
            )

    def stop(self) -> None:
        """Stop taking jobs and finish the running ones (what SIGTERM does)."""
        self.worker.handle_sig_wait_for_completion(signal.SIGTERM)

    async def _recover_now_and_then(self) -> None:
        queue = RedisJobQueue(self.context, self.settings, jobs=self.jobs)
        queue._redis = self.redis
        while True:
            try:
                await queue.recover()
            except Exception as exc:  # the next pass tries again
                log.warning("jobs_recovery_failed", error_type=type(exc).__name__)
            await asyncio.sleep(RECOVER_EVERY)

    async def _update_gauges(self) -> None:
        queue = RedisJobQueue(self.context, self.settings, jobs=self.jobs)
        queue._redis = self.redis
        while True:
            await update_queue_gauges(queue)
            await asyncio.sleep(GAUGES_EVERY)


def worker_context(settings: Settings) -> JobContext:
    """What handlers get in a worker process: the database, the blob store and the settings.

    The handlers themselves are registered by the caller (``parley.worker`` loads the task modules).
    """
    from starlette.datastructures import State

    from parley.kit.blobs import blob_store_from_settings
    from parley.kit.db import Database

    state = State()
    state.settings = settings
    state.db = Database.from_url(
        settings.resolved_database_url, pool_size=settings.db_pool_size, pool_timeout=settings.db_pool_timeout
    )
    state.blobs = blob_store_from_settings(settings)
    context = JobContext(db=state.db, state=state)
    # Jobs that queue further jobs (``runner_for(ctx.state)``) put them in Redis too.
    state.jobs = RedisJobQueue(context, settings)
    return context


async def run_worker(settings: Settings, *, concurrency: int, grace: int) -> None:
    """``parley worker``: work the queue until SIGTERM/SIGINT, then dispose of the database."""
    context = worker_context(settings)
    # Jobs read configuration through kit/orgcache.py too: invalidated through Redis as in the app.
    org_bus = OrgBus.from_settings(org_cache_of_database(context.db, distributed=True), settings)
    org_bus.start()
    worker = QueueWorker(context, settings, concurrency=concurrency, grace=grace)
    try:
        await worker.run()
    finally:
        await org_bus.stop()
        await context.state.jobs.stop()
        await context.db.dispose()


def queue_from_settings(context: JobContext, settings: Settings) -> JobQueue:
    """The Redis queue in distributed mode (``PARLEY_REDIS_URL``), else the in-process runner."""
    if settings.redis_url:
        return RedisJobQueue(context, settings)
    return JobRunner(context)
