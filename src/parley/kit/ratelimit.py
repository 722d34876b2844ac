"""Rate limiting: an approximate sliding window per key, in the process or shared through Redis.

Both limiters answer ``await limiter.check(key)`` with a :class:`RateDecision`; the app picks the
Redis one when ``PARLEY_REDIS_URL`` is set (:func:`limiter_from_settings`), so every API process and
host counts against the same windows. When Redis cannot be reached the Redis limiter lets requests
through (fail open) and logs a warning at most every 30 s: an outage of the limiter must not become an
outage of the API.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from parley.config import Settings

log = structlog.get_logger("parley.ratelimit")


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    retry_after: int


class RateLimiter(Protocol):
    limit: int

    async def check(self, key: str, *, limit: int | None = None, peek: bool = False) -> RateDecision:
        """Count one request against ``key`` (``limit`` overrides the default; 0 means no limit).

        ``peek`` answers whether one more request would be allowed without counting it.
        """
        ...

    async def aclose(self) -> None: ...


class SlidingWindowLimiter:
    """Approximate sliding window over two fixed windows; bounded memory (LRU of keys)."""

    def __init__(self, limit: int, window_seconds: float = 60.0, max_keys: int = 100_000) -> None:
        self.limit = limit
        self.window = window_seconds
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[int, int, int]] = OrderedDict()

    def hit(
        self, key: str, now: float | None = None, *, limit: int | None = None, peek: bool = False
    ) -> RateDecision:
        limit = self.limit if limit is None else limit
        if limit <= 0 or (peek and key not in self._buckets):
            return RateDecision(True, 0)  # nothing counted against the key: a peek changes nothing either
        now = time.monotonic() if now is None else now
        window_index = int(now // self.window)
        current_index, current, previous = self._buckets.pop(key, (window_index, 0, 0))
        if current_index != window_index:
            previous = current if current_index == window_index - 1 else 0
            current = 0
        elapsed = (now % self.window) / self.window
        estimated = previous * (1 - elapsed) + current
        if estimated + 1 > limit:
            self._buckets[key] = (window_index, current, previous)
            retry = math.ceil(self.window - (now % self.window))
            return RateDecision(False, max(1, retry))
        self._buckets[key] = (window_index, current if peek else current + 1, previous)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return RateDecision(True, 0)

    async def check(self, key: str, *, limit: int | None = None, peek: bool = False) -> RateDecision:
        return self.hit(key, limit=limit, peek=peek)

    async def aclose(self) -> None:
        return None


# The same estimate as SlidingWindowLimiter, atomically in Redis, on Redis's clock (so every host agrees).
# KEYS[1]: the key's base name; ARGV: limit, window in ms, 1 to only peek (count nothing).
# Answers {allowed, retry_after_seconds}.
_SLIDING_WINDOW = """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local index = math.floor(now / window)
local current_key = KEYS[1] .. ':' .. index
local current = tonumber(redis.call('GET', current_key) or '0')
local previous = tonumber(redis.call('GET', KEYS[1] .. ':' .. (index - 1)) or '0')
local elapsed = (now % window) / window
if previous * (1 - elapsed) + current + 1 > limit then
  return {0, math.ceil((window - (now % window)) / 1000)}
end
if ARGV[3] == '1' then
  return {1, 0}
end
redis.call('INCR', current_key)
redis.call('PEXPIRE', current_key, window * 2)
return {1, 0}
"""

WARN_EVERY = 30.0
PAUSE_AFTER_FAILURE = 5.0  # after a failure, requests skip Redis this long instead of waiting on it


class RedisLimiter:
    """The sliding window kept in Redis (one Lua script per check); fails open when Redis is down."""

    def __init__(self, redis: Redis, prefix: str, limit: int, window_seconds: float = 60.0) -> None:
        self.redis = redis
        self.prefix = prefix
        self.limit = limit
        self.window = window_seconds
        self._script = redis.register_script(_SLIDING_WINDOW)
        self._warned_at = -WARN_EVERY
        self._paused_until = 0.0
        self.failures = 0

    async def check(self, key: str, *, limit: int | None = None, peek: bool = False) -> RateDecision:
        limit = self.limit if limit is None else limit
        if limit <= 0 or time.monotonic() < self._paused_until:
            return RateDecision(True, 0)
        try:
            allowed, retry = await self._script(
                keys=[f"{self.prefix}:{key}"], args=[limit, int(self.window * 1000), int(peek)]
            )
        except (RedisError, OSError, TimeoutError) as exc:
            self.failures += 1
            now = time.monotonic()
            self._paused_until = now + PAUSE_AFTER_FAILURE
            if now - self._warned_at >= WARN_EVERY:
                self._warned_at = now
                log.warning(
                    "rate_limit_unavailable",
                    detail="Redis cannot be reached; requests are let through without a rate limit.",
                    error_type=type(exc).__name__,
                    failures=self.failures,
                )
            return RateDecision(True, 0)
        return RateDecision(bool(allowed), max(1, int(retry)) if not allowed else 0)

    async def aclose(self) -> None:
        await self.redis.aclose()


def limiter_from_settings(settings: Settings) -> RateLimiter:
    """The Redis limiter in distributed mode, else the in-process one."""
    if settings.redis_url:
        from parley.kit.redis import key, redis_client

        # A short timeout: a slow Redis must not hold up every request.
        client = redis_client(settings, command_timeout=0.5, connect_timeout=0.5)
        return RedisLimiter(client, key(settings, "rl"), settings.rate_limit_per_minute)
    return SlidingWindowLimiter(settings.rate_limit_per_minute)
