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
            random = int.from_bytes(os.urandom(10), "big")
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
