"""API keys of the connector: format, hashing and the create/list/revoke operations.

A key reads ``pcn_<key id>_<secret>``. The key id is public (it names the row, like a username), the
whole key is stored only as its SHA-256 hash and compared with :func:`hmac.compare_digest`, so the
plaintext exists once: when it is printed at creation.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.connector.errors import ConnectorUsageError
from parley.connector.models import api_keys

KEY_PREFIX = "pcn"
MAX_KEY_LENGTH = 128
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_KEY_ID_RE = re.compile(r"^[0-9a-f]{12}$")


@dataclass(frozen=True, slots=True)
class KeyInfo:
    name: str
    key_id: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key: str) -> str | None:
    """The public key id of a well-formed key, else None (malformed keys are simply invalid)."""
    if len(key) > MAX_KEY_LENGTH:
        return None
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[2] or not _KEY_ID_RE.match(parts[1]):
        return None
    return parts[1]


def matches(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(key), stored_hash)


def generate_key() -> tuple[str, str]:
    """A new (key id, plaintext key)."""
    key_id = secrets.token_hex(6)
    return key_id, f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"


def validate_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ConnectorUsageError(
            "A key name is 1-100 characters of letters, digits, '.', '_' or '-', starting with a letter "
            "or digit."
        )
    return name


async def create_key(engine: AsyncEngine, name: str) -> str:
    """Store a new active key named ``name`` and return its plaintext (shown once, never stored)."""
    validate_name(name)
    key_id, key = generate_key()
    try:
        async with engine.begin() as conn:
            exists = await conn.scalar(
                sa.select(sa.func.count())
                .select_from(api_keys)
                .where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
            )
            if exists:
                raise ConnectorUsageError(f"An active key named {name!r} exists; revoke it first.")
            await conn.execute(
                api_keys.insert().values(
                    name=name, key_id=key_id, key_hash=hash_key(key), created_at=datetime.now(UTC)
                )
            )
    except IntegrityError as exc:  # a concurrent create of the same name
        raise ConnectorUsageError(f"An active key named {name!r} exists; revoke it first.") from exc
    return key


async def list_keys(engine: AsyncEngine) -> list[KeyInfo]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(
                api_keys.c.name, api_keys.c.key_id, api_keys.c.created_at, api_keys.c.revoked_at
            ).order_by(api_keys.c.created_at, api_keys.c.id)
        )
        return [KeyInfo(r.name, r.key_id, r.created_at, r.revoked_at) for r in rows]


async def revoke_key(engine: AsyncEngine, name: str) -> None:
    async with engine.begin() as conn:
        result = await conn.execute(
            api_keys.update()
            .where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=datetime.now(UTC))
        )
        if result.rowcount == 0:
            raise ConnectorUsageError(f"No active key named {name!r}.")
