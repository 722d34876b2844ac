"""Which process holds a session's live audio, and control messages that reach it there.

A live audio stream (the WebSocket transport) runs in the one API process the caller is connected
to, while ``POST /api/sessions/{id}/end`` or ``/voice`` may land on any process behind the load
balancer. The holder registers the session with a control handler; a route that changed the
session sends a control message (``{"action": "end", ...}`` or ``{"action": "voice", ...}``) once
its transaction has committed, and the holder's handler stops or mutes its pipeline.

- :class:`LocalRegistry` (embedded default): a dictionary; messages reach handlers in this process.
- :class:`RedisRegistry` (``PARLEY_REDIS_URL``): ``{prefix}:live:{session_id}`` holds the holder's
  process id with a TTL, renewed by a heartbeat while the stream lasts (a process that dies leaves
  no stale entry for long); each process listens on its own channel ``{prefix}:ctl:{process_id}``
  and a message is published to the holder's channel. Messages to sessions this process holds are
  delivered directly.

Control is best effort, never a reason to fail a request: the database row is the truth (the
pipeline also sees an ended session at its next turn); a message that cannot be delivered is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.db import after_commit

log = structlog.get_logger("parley.sessions.registry")

ControlMessage = dict[str, Any]
ControlHandler = Callable[[ControlMessage], Awaitable[None]]

HOLD_TTL = 30  # seconds a registration lives without a heartbeat
CONTROL_TIMEOUT = 2.0  # a request waits at most this long for its control message to go out
HEARTBEAT_EVERY = 10.0
RECONNECT_DELAY = 1.0

# Delete the registration only while it is still ours (another process may have taken the session).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class LocalRegistry:
    """Live sessions of this process only (the embedded default)."""

    def __init__(self) -> None:
        self.handlers: dict[str, ControlHandler] = {}
        self.process_id = "local"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.handlers.clear()

    async def hold(self, session_id: str, handler: ControlHandler) -> None:
        self.handlers[session_id] = handler

    async def release(self, session_id: str, handler: ControlHandler | None = None) -> None:
        if handler is None or self.handlers.get(session_id) == handler:
            self.handlers.pop(session_id, None)

    async def holder(self, session_id: str) -> str | None:
        return self.process_id if session_id in self.handlers else None

    async def control(self, session_id: str, message: ControlMessage) -> bool:
        """Deliver ``message`` to the session's holder; True when one was found."""
        return await self._deliver(session_id, message)

    async def _deliver(self, session_id: str, message: ControlMessage) -> bool:
        handler = self.handlers.get(session_id)
        if handler is None:
            return False
        try:
            await handler(message)
        except Exception as exc:  # a broken handler must not fail the request that sent the message
            log.warning("session_control_failed", session_id=session_id, error_type=type(exc).__name__)
        return True


class RedisRegistry(LocalRegistry):
    """Live sessions of every process, through Redis (distributed mode)."""

    def __init__(self, redis: Redis, prefix: str, process_id: str) -> None:
        super().__init__()
        self.redis = redis
        self.prefix = prefix
        self.process_id = process_id
        self.channel = f"{prefix}:ctl:{process_id}"
        self._release = redis.register_script(_RELEASE)
        self._tasks: list[asyncio.Task[None]] = []
        self._subscribed = asyncio.Event()

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}:live:{session_id}"

    async def start(self) -> None:
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._listen(), name="parley-session-control"),
            loop.create_task(self._heartbeat(), name="parley-session-heartbeat"),
        ]

    async def wait_subscribed(self, seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds):
            await self._subscribed.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for session_id in list(self.handlers):
            await self.release(session_id)
        await self.redis.aclose()

    async def hold(self, session_id: str, handler: ControlHandler) -> None:
        await super().hold(session_id, handler)
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT):
                await self.redis.set(self._key(session_id), self.process_id, ex=HOLD_TTL)
        except (RedisError, OSError, TimeoutError) as exc:  # the heartbeat registers it when Redis is back
            log.warning("session_register_failed", session_id=session_id, error_type=type(exc).__name__)

    async def release(self, session_id: str, handler: ControlHandler | None = None) -> None:
        if handler is not None and self.handlers.get(session_id) != handler:
            return
        await super().release(session_id, handler)
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT):
                await self._release(keys=[self._key(session_id)], args=[self.process_id])
        except (RedisError, OSError, TimeoutError) as exc:  # the registration expires by itself
            log.warning("session_unregister_failed", session_id=session_id, error_type=type(exc).__name__)

    async def holder(self, session_id: str) -> str | None:
        if session_id in self.handlers:
            return self.process_id
        value = await self.redis.get(self._key(session_id))
        return value.decode() if isinstance(value, bytes) else value

    async def control(self, session_id: str, message: ControlMessage) -> bool:
        if await self._deliver(session_id, message):
            return True
        try:
            async with asyncio.timeout(CONTROL_TIMEOUT):
                holder = await self.holder(session_id)
                if holder is None:
                    return False
                body = json.dumps({"session_id": session_id, "message": message})
                receivers = await self.redis.publish(f"{self.prefix}:ctl:{holder}", body)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("session_control_unsent", session_id=session_id, error_type=type(exc).__name__)
            return False
        return bool(receivers)

    async def _listen(self) -> None:
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._subscribed.set()
                while True:
                    item = await pubsub.get_message(timeout=5.0)
                    if item is None or item.get("type") != "message":
                        continue
                    await self._received(item["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                self._subscribed.clear()
                log.warning("session_control_listener_down", error_type=type(exc).__name__)
                await asyncio.sleep(RECONNECT_DELAY)
            finally:
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _received(self, data: bytes | str) -> None:
        try:
            body = json.loads(data)
            session_id, message = str(body["session_id"]), dict(body["message"])
        except (ValueError, KeyError, TypeError):
            log.warning("session_control_malformed")
            return
        await self._deliver(session_id, message)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY)
            if not self.handlers:
                continue
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for session_id in list(self.handlers):
                        pipe.set(self._key(session_id), self.process_id, ex=HOLD_TTL)
                    await pipe.execute()
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("session_heartbeat_failed", error_type=type(exc).__name__)


LiveRegistry = LocalRegistry


def registry_from_settings(settings: Settings) -> LiveRegistry:
    if settings.redis_url:
        from parley.kit.redis import key, process_id, redis_client

        # Pub/sub reads block: no command timeout on this client (get_message has its own).
        return RedisRegistry(redis_client(settings, command_timeout=None), key(settings), process_id())
    return LocalRegistry()


def control_after_commit(
    session: AsyncSession, registry: LiveRegistry, session_id: str, message: ControlMessage
) -> None:
    """Send ``message`` to the process holding the session's live stream once the change has committed."""

    async def send() -> None:
        delivered = await registry.control(session_id, message)
        if delivered:
            log.info("session_control_sent", session_id=session_id, action=message.get("action"))

    after_commit(session, send)
