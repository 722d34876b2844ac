"""Invalidations of in-process caches across processes, through Redis pub/sub (distributed mode).

A cache that keeps database rows in each process (the identity cache, ``auth/cache.py``; the
per-organization configuration cache, ``kit/orgcache.py``) drops what a commit changed in the
committing process at once. With ``PARLEY_REDIS_URL`` an :class:`InvalidationBus` tells the others: the
committing process publishes the changes on the cache's own channel ``<prefix>:<name>``, every process
subscribes to it and drops what it receives (its own messages carry its sender id and are skipped).

**Lifetimes** (:attr:`BusCache.ttl`): :data:`LONG_TTL` (30 s) while the process is subscribed;
:data:`SHORT_TTL` (1 s) in distributed mode while it is not (Redis down, the subscription lost or not
made yet); :data:`LOCAL_TTL` (5 s) without Redis, where other processes on the same database see a
change within 5 s. The lifetime applies when an entry is read, so entries stored while subscribed expire
within a second once the subscription is lost. When the subscription is (re)made the cache is emptied,
since messages may have been missed; a message that cannot be read empties it too. A change that
cannot be published (Redis down) is logged, not re-sent: the others' subscription is down as well
(1 s) or, if only the publisher lost Redis, their entries expire within 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self

import structlog
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from parley.config import Settings

log = structlog.get_logger("parley.kit.bus")

LONG_TTL = 30.0  # seconds an entry lives while invalidations arrive through Redis
LOCAL_TTL = 5.0  # without Redis: this process's changes apply at once, other processes' within 5 s
SHORT_TTL = 1.0  # distributed mode while Redis cannot be reached
PUBLISH_TIMEOUT = 0.5
RECONNECT_DELAY = 0.5


class BusCache(ABC):
    """A cache whose invalidations travel on an :class:`InvalidationBus`: the bus's state and the
    lifetime that follows from it (module docstring).

    :attr:`ttl` is a plain attribute, recomputed when :attr:`subscribed` or :attr:`distributed` change,
    so a lookup reads it without a call."""

    def __init__(self) -> None:
        self._subscribed = False  # True while invalidations reach this process through Redis
        self._distributed = False  # True once a Redis bus serves this cache (PARLEY_REDIS_URL)
        self.ttl = LOCAL_TTL
        self.bus: InvalidationBus | None = None

    @property
    def subscribed(self) -> bool:
        return self._subscribed

    @subscribed.setter
    def subscribed(self, value: bool) -> None:
        self._subscribed = value
        self._lifetime_changed()

    @property
    def distributed(self) -> bool:
        return self._distributed

    @distributed.setter
    def distributed(self, value: bool) -> None:
        self._distributed = value
        self._lifetime_changed()

    def _lifetime_changed(self) -> None:
        if self._subscribed:
            self.ttl = LONG_TTL
        else:
            self.ttl = SHORT_TTL if self._distributed else LOCAL_TTL

    def publish(self, changes: Any) -> None:
        """Tell the other processes about ``changes`` (their JSON form), if a bus serves this cache."""
        if self.bus is not None:
            self.bus.publish(changes)

    @abstractmethod
    def clear(self) -> None:
        """Drop every entry (and make reads in flight not store)."""

    @abstractmethod
    def received(self, changes: Any) -> None:
        """Drop what another process's ``changes`` (as published, decoded from JSON) concern; raise
        ``ValueError``, ``KeyError``, ``TypeError`` or ``AttributeError`` when they are malformed."""


class InvalidationBus:
    """Publishes this process's changes of one cache and applies every other process's.

    A subclass names the cache (:attr:`name`): the channel is ``<prefix>:<name>``, the log events are
    ``<name>_invalidation_unsent``, ``<name>_invalidation_malformed`` and ``<name>_cache_listener_down``.
    """

    name: ClassVar[str]

    def __init__(self, cache: BusCache, redis: Redis, channel: str) -> None:
        self.cache = cache
        self.redis = redis
        self.channel = channel
        self.sender = os.urandom(8).hex()
        self.published = 0
        self.publish_failures = 0
        self._listener: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self.subscribed_event = asyncio.Event()
        self._warned_down = False

    @classmethod
    def from_settings(cls, cache: BusCache, settings: Settings) -> Self:
        from parley.kit.redis import key, redis_client

        # No socket timeout on the subscriber's reads (it waits for messages); connects fail fast.
        client = redis_client(settings, command_timeout=None, connect_timeout=1.0)
        return cls(cache, client, key(settings, cls.name))

    def start(self) -> None:
        self.cache.bus = self
        self.cache.distributed = True
        self._listener = asyncio.create_task(self._listen(), name=f"{self.name}-cache-listener")

    async def stop(self) -> None:
        if self.cache.bus is self:
            self.cache.bus = None
        self.cache.subscribed = False
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        for task in list(self._publishing):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()

    def publish(self, changes: Any) -> None:
        try:
            task = asyncio.get_running_loop().create_task(self._publish(changes))
        except RuntimeError:  # no loop (a synchronous commit): the short lifetime bounds the others
            return
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, changes: Any) -> None:
        body = json.dumps({"sender": self.sender, "changes": changes})
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                await self.redis.publish(self.channel, body)
            self.published += 1
        except (RedisError, OSError, TimeoutError) as exc:
            self.publish_failures += 1
            log.warning(
                f"{self.name}_invalidation_unsent",
                detail="Redis cannot be reached; other processes see the change when their "
                "entries expire (1 s while their subscription is down too).",
                error_type=type(exc).__name__,
            )

    async def _listen(self) -> None:
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                # Messages may have been missed while unsubscribed: start from an empty cache.
                self.cache.clear()
                self.cache.subscribed = True
                self.subscribed_event.set()
                self._warned_down = False
                while True:
                    item = await pubsub.get_message(timeout=1.0)
                    if item is not None and item.get("type") == "message":
                        self._received(item["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                if not self._warned_down:  # once per outage, not every reconnect attempt
                    self._warned_down = True
                    log.warning(
                        f"{self.name}_cache_listener_down",
                        detail=f"Redis cannot be reached; {self.name} cache entries live 1 s until it is back.",
                        error_type=type(exc).__name__,
                    )
            finally:
                self.cache.subscribed = False
                self.subscribed_event.clear()
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(RECONNECT_DELAY)

    def _received(self, data: bytes | str) -> None:
        try:
            body = json.loads(data)
            if body.get("sender") == self.sender:
                return
            self.cache.received(body["changes"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning(f"{self.name}_invalidation_malformed")
            self.cache.clear()
