"""Prefixed, time-sortable ids such as ``org_01JD5Z...`` (ULIDs): readable in logs, ordered by creation."""

from __future__ import annotations

import os
import threading
import time

PREFIXES = {
    "organization": "org",
    "user": "usr",
    "membership": "mem",
    "api_key": "key",
    "audit_event": "aud",
}

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Every 10-bit value as its two base32 digits.
_PAIRS = [_CROCKFORD[i >> 5] + _CROCKFORD[i & 31] for i in range(1024)]


_RANDOM_MAX = (1 << 80) - 1
_last = [0, 0]  # the millisecond and the random part of the last id made here
_lock = threading.Lock()
# Random bytes are read from the OS 256 ids' worth at a time (one system call instead of one per id);
# a forked child starts with an empty pool, so it never repeats its parent's ids.
_POOL_SIZE = 10 * 256


class _RandomPool:
    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.data, self.at = b"", _POOL_SIZE

    def random80(self) -> int:
        """80 random bits from the OS's generator (call with ``_lock`` held)."""
        at = self.at
        if at >= _POOL_SIZE:
            self.data, at = os.urandom(_POOL_SIZE), 0
        self.at = at + 10
        return int.from_bytes(self.data[at : at + 10], "big")


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool.forget)


def ulid() -> str:
    """A ULID (48-bit millisecond time, 80 random bits) as 26 Crockford base32 characters.

    The same format as the ``ulid`` package's ``str(ULID())``, made without its objects: ids are made on
    every request (the request id), so this is on the hot path. Monotonic within a process, like that
    package's: an id made in the same millisecond as the one before (or while the clock steps back) is
    the one before plus one, so rows made in one batch list in the order they were made.
    """
    now = time.time_ns() // 1_000_000
    with _lock:
        last_ms, last_random = _last
        if now <= last_ms and last_random < _RANDOM_MAX:
            now, random = last_ms, last_random + 1
        else:
            random = _pool.random80()
        _last[0], _last[1] = now, random
    return _encode(now << 80 | random)


def _encode(value: int) -> str:
    """128 bits as 26 base32 digits (130 bits: the first digit holds the top 3), ten bits at a time."""
    out = []
    for _ in range(13):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"
