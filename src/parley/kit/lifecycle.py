"""Graceful shutdown: drain this process's live calls before the server stops.

On the first SIGTERM (or SIGINT) the process *drains*: new sessions (``POST /api/sessions``) and new
audio sockets are refused with 503 / close code 4503 so a load balancer sends them elsewhere, while
the calls already live here go on for up to ``PARLEY_SHUTDOWN_GRACE_SECONDS``. Calls still running
then are ended with reason ``shutdown`` (their call records written) and only then does uvicorn stop
(closing connections, running the lifespan shutdown). A second signal stops at once.

The handler wraps the server's own (uvicorn installs it with ``signal.signal`` before the app starts),
so it works the same for ``parley serve``, ``--workers N`` (each worker drains itself) and ``parley up``.
Text sessions over HTTP are rows in the database, not bound to a process: their in-flight turns
finish like any request, and a conversation continues on another process (or after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, Protocol

import orjson
import structlog
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.kit.errors import ServiceUnavailable
from parley.kit.metrics import DRAINING, LIVE_CALLS

log = structlog.get_logger("parley.lifecycle")

SHUTDOWN_REASON = "shutdown"
STOP_WAIT_SECONDS = 10.0  # how long a call may take to end itself after being told to stop


class LiveCall(Protocol):
    """A conversation bound to this process (an audio socket) that a shutdown must end."""

    session_id: str

    def stop(self, reason: str) -> None:
        """Ask the call to end now: finish the turn in progress, end the session with ``reason``."""


class Draining(ServiceUnavailable):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__(
            "This server is shutting down and takes no new sessions; retry (another instance will answer).",
            headers={"Retry-After": "2"},
        )


class Lifecycle:
    """The process's live calls and whether it is draining."""

    def __init__(self, grace_seconds: float, transport: str = "websocket") -> None:
        self.grace_seconds = grace_seconds
        self.transport = transport
        self.draining = False
        self._calls: dict[int, LiveCall] = {}
        self._changed: asyncio.Event | None = None
        self._ending = False

    @property
    def live(self) -> list[LiveCall]:
        return list(self._calls.values())

    def refuse_if_draining(self) -> None:
        if self.draining:
            raise Draining()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    @contextlib.contextmanager
    def track(self, call: LiveCall, transport: str = "websocket") -> Iterator[None]:
        """Count ``call`` as live while the block runs (a call arriving during a drain is stopped)."""
        self._calls[id(call)] = call
        LIVE_CALLS.labels(transport).inc()
        if self._ending:
            call.stop(SHUTDOWN_REASON)
        try:
            yield
        finally:
            self._calls.pop(id(call), None)
            LIVE_CALLS.labels(transport).dec()
            self._notify()

    async def _wait_empty(self, seconds: float) -> bool:
        """Wait until no call is live (True) or ``seconds`` pass (False)."""
        deadline = time.monotonic() + seconds
        self._changed = asyncio.Event()
        try:
            while self._calls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=left)
            return True
        finally:
            self._changed = None

    async def drain(self, grace_seconds: float | None = None) -> int:
        """Refuse new sessions, let live calls finish within the grace period, end the rest.

        Answers how many calls were ended with reason ``shutdown``.
        """
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        if not self.draining:
            self.draining = True
            DRAINING.set(1)
            log.info("shutdown_draining", live_calls=len(self._calls), grace_seconds=grace)
        if await self._wait_empty(grace):
            log.info("shutdown_drained")
            return 0
        self._ending = True
        remaining = self.live
        log.warning("shutdown_ending_calls", count=len(remaining))
        for call in remaining:
            call.stop(SHUTDOWN_REASON)
        if not await self._wait_empty(STOP_WAIT_SECONDS):
            log.error("shutdown_calls_left", count=len(self._calls))
        return len(remaining)


def lifecycle_of(app: Any) -> Lifecycle:
    lifecycle: Lifecycle | None = getattr(app.state, "lifecycle", None)
    if lifecycle is None:
        settings = app.state.settings
        lifecycle = Lifecycle(settings.shutdown_grace_seconds)
        app.state.lifecycle = lifecycle
    return lifecycle


_HANDLED = (signal.SIGTERM, signal.SIGINT)


class SignalDrain:
    """Wraps the server's SIGTERM/SIGINT handlers: the first signal drains, then hands over."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle
        self._previous: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[None] | None = None
        self._signalled = False

    def install(self) -> bool:
        # Signal handlers can only be set from the main thread (tests serve apps in other threads).
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        for sig in _HANDLED:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return True

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous)
        self._previous.clear()

    def _hand_over(self, sig: int, frame: FrameType | None) -> None:
        previous = self._previous.get(sig)
        if callable(previous):
            previous(sig, frame)
        elif previous == signal.SIG_DFL and sig == signal.SIGINT:
            raise KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        if self._signalled or self._loop is None:
            self._hand_over(sig, frame)  # a second signal: stop now
            return
        self._signalled = True
        log.info("shutdown_signal", signal=signal.Signals(sig).name)

        async def drain_then_exit() -> None:
            try:
                await self.lifecycle.drain()
            finally:
                self._hand_over(sig, None)

        def start() -> None:
            self._task = asyncio.ensure_future(drain_then_exit())

        self._loop.call_soon_threadsafe(start)


# Requests that open a new conversation; refused while draining (turns of live sessions go on).
_OPENING = frozenset({("POST", "/api/sessions"), ("POST", "/api/sessions/")})


class DrainMiddleware:
    """503 with ``Retry-After`` for requests that would start a session while the process drains."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and (scope["method"], scope["path"]) in _OPENING
            and lifecycle_of(scope["app"]).draining
        ):
            error = Draining()
            body = orjson.dumps({"detail": error.detail, "code": error.code})
            await send(
                {
                    "type": "http.response.start",
                    "status": error.status_code,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", b"2"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


# Net new container objects between two young collections (CPython's default is 700). Objects of the
# requests in flight are young and freed by reference counting within milliseconds; at 700, a server
# with tens of requests in flight collected a few hundred times a second, each time promoting those
# requests' objects to older generations, whose collections then paused every request in flight
# (docs/benchmarks.md, "GET by id", eleventh round). Garbage in reference cycles is still collected.
YOUNG_GENERATION_THRESHOLD = 10_000


def settle_heap() -> None:
    """Move what start-up built (modules, routes, schemas, the app) out of the garbage collector's reach,
    and collect the young generation less often.

    Those objects live as long as the process, yet every full collection walked all of them: under load
    the collector's pauses cost a third of a simple request's throughput and most of its p99
    (docs/benchmarks.md). Called once by the serving entry points after the app is built, never by
    tests (which build many apps in one process and need them collected).
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, old)
