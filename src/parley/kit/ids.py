"""Prefixed, time-sortable ids such as ``org_01JD5Z...`` (ULIDs): readable in logs, ordered by creation."""

from __future__ import annotations

from ulid import ULID

PREFIXES = {
    "organization": "org",
    "user": "usr",
    "membership": "mem",
    "api_key": "key",
    "audit_event": "aud",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"
