"""The idle sweeper: a background task that ends sessions nobody has written to for a while."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from parley.kit.db import Database
from parley.kit.jobs import JobQueue
from parley.sessions.registry import LiveRegistry
from parley.sessions.service import sweep_idle

log = structlog.get_logger("parley.sessions")


class IdleSweeper:
    """Every ``interval`` seconds, end sessions idle longer than ``idle_seconds`` (outcome abandoned)."""

    def __init__(
        self,
        database: Database,
        idle_seconds: float,
        interval: float | None = None,
        jobs: JobQueue | None = None,
        live: LiveRegistry | None = None,
    ) -> None:
        self.database = database
        self.jobs = jobs
        self.live = live
        self.idle_seconds = idle_seconds
        self.interval = interval or min(max(idle_seconds / 4, 0.5), 30.0)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="parley-session-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _ended(self, session_id: str) -> None:
        # A live audio stream of the session, in whichever process holds it, ends too.
        if self.live is not None:
            await self.live.control(
                session_id, {"action": "end", "outcome": "abandoned", "reason": "idle_timeout"}
            )

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                ended = await sweep_idle(
                    self.database, self.idle_seconds, jobs=self.jobs, on_ended=self._ended
                )
            except Exception as exc:  # the sweeper must outlive a failing database
                log.warning("session_sweep_failed", error_type=type(exc).__name__)
                continue
            if ended:
                log.info("sessions_ended_idle", count=ended)
