"""The retention job: delete calls, recordings and transcripts older than each organization's retention.

A timer in every API process (:class:`RetentionSweeper`, like the token refresher) queues the job every
``PARLEY_PRIVACY_RETENTION_INTERVAL_SECONDS``; the job runs in process, or in ``parley worker`` with
Redis. Each organization is worked in batches, each batch in a unit of work of its own (its audit
events commit with the deletions; recordings are removed once it has committed).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

import structlog

from parley.kit.blobs import BlobStore
from parley.kit.db import Database, unit_of_work
from parley.kit.jobs import JobContext, JobQueue, Payload, registry
from parley.privacy.schemas import RetentionRunOut
from parley.privacy.service import RETENTION_BATCH, expire_batch, organizations_with_retention

log = structlog.get_logger("parley.privacy")

RETENTION_JOB = "privacy.retention"


async def expire_organization(
    database: Database,
    blobs: BlobStore,
    organization_id: str,
    retention_days: int,
    *,
    now: datetime | None = None,
) -> RetentionRunOut:
    """Every batch for one organization until none is left; answers the totals."""
    total = RetentionRunOut(retention_days=retention_days, calls=0, recordings=0)
    while True:
        async with unit_of_work(database) as session:
            batch = await expire_batch(session, blobs, organization_id, retention_days, now=now)
        total.calls += batch.calls
        total.recordings += batch.recordings
        for name, count in batch.sources.items():
            total.sources[name] = total.sources.get(name, 0) + count
        if batch.calls < RETENTION_BATCH:
            return total


async def expire_all(database: Database, blobs: BlobStore, *, now: datetime | None = None) -> int:
    """Apply every organization's retention; answers how many calls were deleted."""
    async with unit_of_work(database, write=False) as reader:
        organizations = await organizations_with_retention(reader)
    deleted = 0
    for organization_id, days in organizations:
        try:
            result = await expire_organization(database, blobs, organization_id, days, now=now)
        except Exception as exc:  # one organization's failure must not stop the others
            log.warning(
                "privacy_retention_failed", organization_id=organization_id, error_type=type(exc).__name__
            )
            continue
        if result.calls or result.sources:
            log.info(
                "privacy_retention_applied",
                organization_id=organization_id,
                calls=result.calls,
                recordings=result.recordings,
                sources=result.sources,
            )
        deleted += result.calls
    return deleted


@registry.handler(RETENTION_JOB)
async def retention_job(ctx: JobContext, payload: Payload) -> None:
    await expire_all(ctx.db, ctx.blobs)


class RetentionSweeper:
    """Every ``interval`` seconds, queue the retention job (``interval`` 0: never)."""

    def __init__(self, jobs: JobQueue, interval: float) -> None:
        self.jobs = jobs
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.interval > 0:
            self._task = asyncio.create_task(self._loop(), name="parley-privacy-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.jobs.submit(RETENTION_JOB, {})
