"""One asyncio lock per session in this process, so turns of one session run one after another.

Locks live only while someone holds or waits for them (a weak-value map), so unknown or finished
session ids do not accumulate. Across processes the row lock and the ``version`` check take over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
