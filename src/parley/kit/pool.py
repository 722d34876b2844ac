"""A connection pool that serves waiting requests in the order they came.

SQLAlchemy's asyncio pool keeps idle connections in an ``asyncio.Queue``. When every connection is
out, a request waits in the queue's line; a connection given back is put into the queue and the
first in line is woken, but any request that asks before the woken one runs takes the connection
first, and the woken one goes back to the *end* of the line. Under load (64 concurrent requests over
30 PostgreSQL connections) some requests waited many turns: p99 ≈ 100 ms against a p50 of 36 ms for
a one-row GET (docs/benchmarks.md, "Platform API").

:class:`FairQueue` hands a connection given back straight to the longest-waiting request; a request
only takes an idle connection when nobody is waiting for one. Nothing else changes: the same pool
size, overflow, time-out (``Empty`` after ``pool_timeout``, which the pool turns into its
``TimeoutError``) and LIFO/FIFO choice of idle connections.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.util import await_
from sqlalchemy.util.queue import Empty, Full, QueueCommon

T = TypeVar("T")


class FairQueue(QueueCommon[T], Generic[T]):
    """The pool's queue of idle connections, first come first served for those waiting."""

    def __init__(self, maxsize: int = 0, use_lifo: bool = False) -> None:
        self.maxsize = maxsize
        self.use_lifo = use_lifo
        self._idle: deque[T] = deque()
        self._waiting: deque[asyncio.Future[T]] = deque()

    def empty(self) -> bool:
        return not self._idle

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self._idle)

    def qsize(self) -> int:
        return len(self._idle)

    def put_nowait(self, item: T) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # a waiter that timed out or was cancelled is skipped
                waiter.set_result(item)
                return
        if self.full():
            raise Full()
        self._idle.append(item)

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        self.put_nowait(item)  # the pool never waits to give a connection back

    def peek(self) -> T | None:
        """The idle connection ``get_nowait`` would return now, or None."""
        if not self._idle:
            return None
        return self._idle[-1] if self.use_lifo else self._idle[0]

    def get_nowait(self) -> T:
        if not self._idle:
            raise Empty()
        return self._idle.pop() if self.use_lifo else self._idle.popleft()

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        if self._idle:  # only while nobody waits: a connection given back goes to the first waiter
            return self.get_nowait()
        if not block:
            raise Empty()
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await_(asyncio.wait_for(waiter, timeout))
        except BaseException as error:
            if waiter.done() and not waiter.cancelled():
                # Handed a connection just as the wait ended: it goes to the next in line (or back).
                self.put_nowait(waiter.result())
            else:
                waiter.cancel()
            if isinstance(error, asyncio.TimeoutError):
                raise Empty() from error
            raise


class FairAsyncAdaptedQueuePool(AsyncAdaptedQueuePool):
    """SQLAlchemy's asyncio pool with :class:`FairQueue` (``create_async_engine(poolclass=...)``)."""

    _queue_class = FairQueue[ConnectionPoolEntry]

    def connect_at_once(self, ready: Callable[[ConnectionPoolEntry], bool]) -> PoolProxiedConnection | None:
        """An idle connection, checked out outside a greenlet, when that takes no wait and no I/O; else
        None (check out with ``greenlet_spawn(pool.connect)``).

        Only an idle connection SQLAlchemy would hand out as it is qualifies: open, not due for
        recycling, not invalidated since it was made, and ``ready`` (the caller's checkout listeners,
        such as an idle ping, need no I/O for it). A check-out that would wait for a connection, make
        one or replace one awaits the driver, which only a greenlet may do.
        """
        queue: FairQueue[ConnectionPoolEntry] = self._pool  # type: ignore[assignment]
        record: Any = queue.peek()
        if record is None or record.dbapi_connection is None or not ready(record):
            return None
        made = record.starttime
        if (0 <= self._recycle < time.time() - made) or self._invalidate_time > made:
            return None
        if record._soft_invalidate_time > made:
            return None
        return self.connect()
