from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from parley.calls.models import Call
from parley.calls.service import record_call
from parley.kit.db import Database
from tests.calls.helpers import make_record

Recorder = Callable[..., Awaitable[Call]]


@pytest.fixture
def record(database: Database) -> Recorder:
    """Store a call record (``make_record`` with overrides) the way the runtime does, committed."""

    async def _record(organization_id: str, **overrides: Any) -> Call:
        async with database.sessionmaker() as session:
            call = await record_call(session, make_record(organization_id, **overrides))
            await session.commit()
            return call

    return _record
