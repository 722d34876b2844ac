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


# SQLite has one writer at a time and waits at most its busy timeout for the lock: letting hundreds of
# turns queue on it turns a burst into "database is locked" errors. Turns therefore queue here, in the
# event loop and without a deadline, and only a few at a time go on. The slots are per organization
# (PARLEY_TURN_SLOTS_PER_ORGANIZATION), so one organization's slow tools or model cannot take every
# slot from the others.
SQLITE_TURN_SLOTS = 4

_SLOTS: WeakValueDictionary[str, asyncio.Semaphore] = WeakValueDictionary()


def slots_per_organization(settings: Any) -> int:
    configured = int(getattr(settings, "turn_slots_per_organization", 0) or 0)
    if configured > 0:
        return configured
    return SQLITE_TURN_SLOTS if settings.is_sqlite else max(settings.db_pool_size - 2, 1)


def _slots(app: Any, organization_id: str) -> asyncio.Semaphore:
    # Keyed by the app too: tests run several apps (with different settings) in one process.
    key = f"{id(app)}:{organization_id}"
    slots = _SLOTS.get(key)
    if slots is None:
        slots = asyncio.Semaphore(slots_per_organization(app.state.settings))
        _SLOTS[key] = slots
    return slots


def slot_free(app: Any, organization_id: str) -> bool:
    """True when a turn of the organization would get a slot at once (no wait)."""
    return not _slots(app, organization_id).locked()


@asynccontextmanager
async def turn_slot(app: Any, organization_id: str) -> AsyncIterator[None]:
    """One of the organization's slots in this process for a conversation turn."""
    slots = _slots(app, organization_id)
    async with slots:
        yield
