"""Background refresh of tokens about to expire: a named job, and a timer that enqueues it."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from parley.integrations.service import refresh_expiring
from parley.kit.jobs import JobContext, JobQueue, Payload, registry

log = structlog.get_logger("parley.integrations")

REFRESH_JOB = "integrations.refresh_expiring"


@registry.handler(REFRESH_JOB)
async def refresh_expiring_job(ctx: JobContext, payload: Payload) -> None:
    refreshed, failed = await refresh_expiring(ctx.db, ctx.settings)
    if refreshed or failed:
        log.info("integration_tokens_refreshed", refreshed=refreshed, failed=failed)


class TokenRefresher:
    """Every ``interval`` seconds, queue the refresh job (``interval`` 0: never)."""

    def __init__(self, jobs: JobQueue, interval: float) -> None:
        self.jobs = jobs
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.interval > 0:
            self._task = asyncio.create_task(self._loop(), name="parley-integrations-refresher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.jobs.submit(REFRESH_JOB, {})
