"""JWKS: the identity provider's public keys, fetched without blocking the event loop and cached.

An unknown ``kid`` triggers at most one refetch per cooldown (a key rotation is picked up at once,
a flood of forged kids cannot hammer the provider). When the provider is briefly unreachable the last
good keys stay in use; only when no key could ever be had is the answer 503 rather than 401.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx
import jwt
import structlog

from parley.kit.errors import ServiceUnavailable, Unauthorized

log = structlog.get_logger("parley.auth.jwks")


def pinned_algorithm(key: jwt.PyJWK) -> str | None:
    """The one algorithm accepted for a key, decided by its type, never by the token."""
    kty = key.key_type
    if kty == "RSA":
        return "RS256"
    if kty == "EC" and key._jwk_data.get("crv") == "P-256":
        return "ES256"
    return None


class JWKSCache:
    def __init__(self, url: str, *, cache_seconds: float = 300.0, refetch_cooldown: float = 30.0) -> None:
        self.url = url
        self.cache_seconds = cache_seconds
        self.refetch_cooldown = refetch_cooldown
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = 0.0
        self._last_attempt = float("-inf")
        self._lock = asyncio.Lock()

    async def _fetch(self) -> None:
        self._last_attempt = time.monotonic()
        try:
            async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as client:
                response = await client.get(self.url, headers={"Accept": "application/json"})
                response.raise_for_status()
                document: Any = response.json()
            entries = document.get("keys") if isinstance(document, dict) else None
            if not isinstance(entries, list):
                raise ValueError("the JWKS document has no list of keys")
            keys: dict[str, jwt.PyJWK] = {}
            for index, data in enumerate(entries):
                if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                    continue
                try:
                    key = jwt.PyJWK(data)
                except jwt.PyJWTError:
                    continue  # a key type we cannot use; the others still work
                if pinned_algorithm(key) is None:
                    continue
                keys[str(data.get("kid", f"#{index}"))] = key
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.warning("jwks_fetch_failed", error_type=type(exc).__name__, kept_keys=len(self._keys))
            return
        if keys:
            self._keys = keys
            self._fetched_at = time.monotonic()

    async def get_key(self, kid: str | None) -> jwt.PyJWK:
        key = self._lookup(kid)
        stale = time.monotonic() - self._fetched_at > self.cache_seconds
        # A request that arrives while another fetches waits for that fetch instead of failing.
        if (key is None or stale) and (self._may_fetch() or self._lock.locked()):
            async with self._lock:
                still_needed = (
                    self._lookup(kid) is None or time.monotonic() - self._fetched_at > self.cache_seconds
                )
                if still_needed and self._may_fetch():
                    await self._fetch()
            key = self._lookup(kid)
        if not self._keys:
            retry_after = max(1, math.ceil(self.refetch_cooldown - (time.monotonic() - self._last_attempt)))
            raise ServiceUnavailable(
                "The identity provider's signing keys cannot be fetched right now; try again shortly.",
                headers={"Retry-After": str(retry_after)},
            )
        if key is None:
            raise Unauthorized("The token is signed with a key the identity provider does not publish.")
        return key

    def _may_fetch(self) -> bool:
        return time.monotonic() - self._last_attempt >= self.refetch_cooldown

    def _lookup(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)
