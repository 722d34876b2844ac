from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from parley.kit.jobs import JobRunner


@pytest.fixture(autouse=True)
async def stop_jobs(app: Any) -> AsyncIterator[None]:
    """Requests start the app's job runner on demand (no lifespan under ASGITransport); end it here."""
    yield
    runner: JobRunner | None = getattr(app.state, "jobs", None)
    if runner is not None:
        await runner.drain()
        await runner.stop()
