"""One asyncio lock per session in this process, so turns of one session run one after another.

Locks live only while someone holds or waits for them (a weak-value map), so unknown or finished
session ids do not accumulate. Across processes the row lock and the ``version`` check take over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from weakref import WeakValueDictionary

_LOCKS: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()


def lock_for(session_id: str) -> asyncio.Lock:
    lock = _LOCKS.get(session_id)
    if lock is None:
        lock = asyncio.Lock()
        _LOCKS[session_id] = lock
    return lock


@asynccontextmanager
async def hold(session_id: str) -> AsyncIterator[None]:
    lock = lock_for(session_id)
    async with lock:
        yield


# SQLite has one writer at a time and waits at most its busy timeout (10 s) for the lock: letting
# hundreds of turns queue on it turns a burst into "database is locked" errors. Turns therefore
# queue here, in the event loop and without a deadline, and only a few at a time go to the database.
SQLITE_TURN_SLOTS = 4


def _slots(app: Any) -> asyncio.Semaphore:
    slots: asyncio.Semaphore | None = getattr(app.state, "session_turn_slots", None)
    if slots is None:
        settings = app.state.settings
        size = SQLITE_TURN_SLOTS if settings.is_sqlite else max(settings.db_pool_size - 2, 1)
        slots = asyncio.Semaphore(size)
        app.state.session_turn_slots = slots
    return slots


@asynccontextmanager
async def turn_slot(app: Any) -> AsyncIterator[None]:
    """One of the process's slots for a turn that writes to the database."""
    async with _slots(app):
        yield
