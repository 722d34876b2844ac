"""The rules of the order operation, shared by the fast path and the FastAPI route.

Order of checks (so that nothing leaks before the caller is known): key in the query string (400),
address blocked after too many failed keys (429), missing or unknown/revoked key (401), per-key rate
limit (429); only then is the id looked at (422 / 404 / 200).
"""

from __future__ import annotations

import asyncio
import hmac
import math
import time
from collections.abc import Iterable

import structlog

from parley.connector import keys
from parley.connector.config import ConnectorSettings
from parley.connector.errors import (
    InvalidKey,
    KeyInQueryString,
    MissingKey,
    OrderNotFound,
    RateLimited,
    StoreUnavailable,
)
from parley.connector.repository import KeyTable, OrderStore

log = structlog.get_logger("parley.connector")

WINDOW_SECONDS = 60.0
# Query parameters that look like a credential: refused so that keys never end up in URLs and logs.
_KEY_PARAMS = frozenset({"api_key", "apikey", "key", "x_api_key", "token", "access_token"})


class KeyCache:
    """Active keys held in memory and reloaded when older than ``ttl`` seconds.

    A reload is one small indexed query, so the cache can be short-lived: a revoked key stops working
    within about ``ttl`` (1 s by default) in every worker, without any cross-process signalling. One
    reload runs at a time; meanwhile other requests keep using the current table, unless it is older
    than twice the ttl (or was never loaded), in which case they wait for the reload.

    A key that matched its SHA-256 hash is remembered, per key id, for the life of the table it was
    checked against: later requests with the same key compare it in constant time with
    :func:`hmac.compare_digest` instead of hashing it again. A reload starts with nothing remembered,
    so a revoked key is refused exactly as soon as without the memo.
    """

    def __init__(self, store: OrderStore, ttl: float) -> None:
        self._store = store
        self._ttl = ttl
        self._table: KeyTable = {}
        self._loaded_at = -math.inf
        self._reloading: asyncio.Event | None = None
        self._verified: dict[str, bytes] = {}  # key id -> the whole key, verified against _table

    def usable(self, now: float) -> bool:
        """Whether the table may answer now without awaiting: loaded within the ttl, or within twice
        the ttl while a reload is under way."""
        age = now - self._loaded_at
        return age <= self._ttl or (self._reloading is not None and age <= 2 * self._ttl)

    async def refresh(self) -> None:
        """Make the table usable: reload it, or wait for the reload under way when the table is too
        old to keep answering meanwhile. Raises :class:`StoreUnavailable` when the reload fails."""
        age = time.monotonic() - self._loaded_at
        if age > self._ttl:
            if self._reloading is None:
                await self._reload()
            elif age > 2 * self._ttl:
                loaded_before = self._loaded_at
                await self._reloading.wait()
                # Whether the reload succeeded, not how long it took: a reload slower than 2 * ttl
                # (a busy database) still brings a fresh table.
                if self._loaded_at == loaded_before:
                    raise StoreUnavailable()  # the reload failed: never fall back to a stale table

    async def get(self, key_id: str) -> tuple[str, str] | None:
        await self.refresh()
        return self._table.get(key_id)

    async def check(self, key_id: str, key: str) -> tuple[str, str] | None:
        """The (hash, name) entry of ``key`` when it is an active key with this id, else None."""
        await self.refresh()
        return self.check_now(key_id, key)

    def check_now(self, key_id: str, key: str) -> tuple[str, str] | None:
        """:meth:`check` against the current table, without awaiting: for a caller that saw
        :meth:`usable` (or has just awaited :meth:`refresh`) with no await since."""
        entry = self._table.get(key_id)
        if entry is None:
            return None
        # The memo and the entry belong to the same table.
        raw = key.encode()
        known = self._verified.get(key_id)
        if known is not None and hmac.compare_digest(raw, known):
            return entry
        if not keys.matches(key, entry[0]):
            return None
        self._verified[key_id] = raw
        return entry

    async def _reload(self) -> None:
        done = self._reloading = asyncio.Event()
        try:
            started = time.monotonic()
            table = await self._store.active_keys()
            self._table, self._verified = table, {}
            self._loaded_at = started
        finally:
            self._reloading = None
            done.set()


class KeyRateLimiter:
    """Token bucket per key: ``per_minute`` requests, refilled continuously, bursts up to one minute."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / WINDOW_SECONDS
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, updated at)

    def take(self, key_id: str, now: float) -> int:
        """Consume one token; return 0 when allowed, else the seconds to wait."""
        if self.per_minute <= 0:
            return 0
        tokens, updated = self._buckets.get(key_id, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - updated) * self._rate)
        if tokens >= 1.0:
            self._buckets[key_id] = (tokens - 1.0, now)
            return 0
        self._buckets[key_id] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / self._rate))


class FailedKeyLimiter:
    """Fixed one-minute windows of failed key attempts (guessing protection), counted per bucket.

    Buckets are never an address alone: one tenant behind the platform's shared address must not lock
    out every other tenant. A failed attempt counts against its key id (a backstop of
    ``KEY_ID_FACTOR`` times the limit, for guessing one key's secret from many places) and against its
    key id + address + organization (the limit). Malformed keys carry no key id and count under ``-``.
    """

    _MAX_TRACKED = 10_000
    KEY_ID_FACTOR = 10

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._windows: dict[tuple[str, ...], tuple[float, int]] = {}  # bucket -> (window start, failures)

    @property
    def tracking(self) -> bool:
        """Whether any failure is counted: without one, no bucket can be blocked (the success path
        then builds no bucket at all)."""
        return bool(self._windows) and self.per_minute > 0

    @staticmethod
    def buckets(key_id: str | None, address: str, organization: str) -> list[tuple[str, ...]]:
        narrow = ("key+address", key_id or "-", address, organization)
        return [("key", key_id), narrow] if key_id else [narrow]

    def _limit(self, bucket: tuple[str, ...]) -> int:
        return self.per_minute * (self.KEY_ID_FACTOR if bucket[0] == "key" else 1)

    def retry_after(self, buckets: list[tuple[str, ...]], now: float) -> int:
        if self.per_minute <= 0:
            return 0
        wait = 0
        for bucket in buckets:
            window = self._windows.get(bucket)
            if window is None:
                continue
            start, failures = window
            if now - start >= WINDOW_SECONDS:
                del self._windows[bucket]
            elif failures >= self._limit(bucket):
                wait = max(wait, math.ceil(WINDOW_SECONDS - (now - start)), 1)
        return wait

    def record_failure(self, buckets: list[tuple[str, ...]], now: float) -> None:
        if self.per_minute <= 0:
            return
        for bucket in buckets:
            start, failures = self._windows.get(bucket, (now, 0))
            if now - start >= WINDOW_SECONDS:
                start, failures = now, 0
            self._windows[bucket] = (start, failures + 1)
        if len(self._windows) > self._MAX_TRACKED:
            self._prune(now)

    def _prune(self, now: float) -> None:
        for bucket in [b for b, (s, _) in self._windows.items() if now - s >= WINDOW_SECONDS]:
            del self._windows[bucket]


def reject_key_in_query(params: Iterable[str]) -> None:
    for name in params:
        if name.lower().replace("-", "_") in _KEY_PARAMS:
            raise KeyInQueryString(
                "API keys are not accepted in the query string; send the key in the X-API-Key header."
            )


class OrderGate:
    """Authorizes callers and produces response bodies; one instance per process."""

    def __init__(self, settings: ConnectorSettings, store: OrderStore) -> None:
        self.store = store
        self.keys = KeyCache(store, settings.key_cache_seconds)
        self.rate = KeyRateLimiter(settings.rate_limit)
        self.failures = FailedKeyLimiter(settings.auth_failure_limit)

    async def authorize(self, key: str | None, address: str, organization: str = "-") -> str:
        """Return the caller's key name, or raise a 401/429 :class:`ConnectorError`.

        ``organization`` is what the platform says it acts for (``X-Parley-Organization``); it only
        separates failure counts and log lines, it grants nothing.
        """
        name = self.authorize_now(key, address, organization)
        if name is None:
            await self.keys.refresh()
            name = self.authorize_now(key, address, organization, table_refreshed=True)
        assert name is not None  # a refreshed table always answers
        return name

    def authorize_now(
        self, key: str | None, address: str, organization: str = "-", *, table_refreshed: bool = False
    ) -> str | None:
        """:meth:`authorize` without awaiting: None (having counted nothing) when the key table
        must be reloaded first, which only :meth:`authorize` does."""
        now = time.monotonic()
        if not key:
            raise MissingKey()
        key_id = keys.key_id_of(key)
        failures = self.failures
        # The buckets are built only when a failure is counted somewhere (none on the success path).
        buckets = failures.buckets(key_id, address, organization) if failures.tracking else None
        if buckets is not None:
            blocked_for = failures.retry_after(buckets, now)
            if blocked_for:
                raise RateLimited("Too many failed attempts with this API key; retry later.", blocked_for)
        if key_id is None:
            entry = None
        elif table_refreshed or self.keys.usable(now):
            entry = self.keys.check_now(key_id, key)
        else:
            return None
        if entry is None:
            failures.record_failure(buckets or failures.buckets(key_id, address, organization), now)
            # The key id is public (like a user name); never the key, never the address.
            log.info("connector.key_rejected", key_id=key_id or "-", organization=organization)
            raise InvalidKey()
        wait = self.rate.take(key_id or "", now)
        if wait:
            raise RateLimited(
                f"Rate limit of {self.rate.per_minute} requests per minute for this key exceeded.", wait
            )
        return entry[1]

    async def order_body(self, order_id: int) -> bytes:
        body = await self.store.body(order_id)
        if body is None:
            raise OrderNotFound(order_id)
        return body
