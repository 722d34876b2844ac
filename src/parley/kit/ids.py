"""Prefixed, time-sortable ids such as ``org_01JD5Z...`` (ULIDs): readable in logs, ordered by creation."""

from __future__ import annotations

import os
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


def ulid() -> str:
    """A ULID (48-bit millisecond time, 80 random bits) as 26 Crockford base32 characters.

    The same format as the ``ulid`` package's ``str(ULID())``, made without its objects: ids are made on
    every request (the request id), so this is on the hot path.
    """
    return _encode((time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big"))


def _encode(value: int) -> str:
    """128 bits as 26 base32 digits (130 bits: the first digit holds the top 3), ten bits at a time."""
    out = []
    for _ in range(13):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"
