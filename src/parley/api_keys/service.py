"""API keys: minted with a random secret, stored only as SHA-256, shown once, revocable."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import Row, Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.api_keys.schemas import ApiKeyCreate, ApiKeyOut
from parley.auth.models import ApiKey
from parley.auth.principal import OrgContext, scopes_role
from parley.auth.roles import Role
from parley.kit.crypto import sha256_hex
from parley.kit.db import utcnow
from parley.kit.errors import Conflict, Forbidden
from parley.kit.ids import new_id
from parley.kit.tenancy import get_owned, read_owned, scoped


def status_of(key: ApiKey | Row[Any]) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= utcnow():
        return "expired"
    return "active"


def to_out(key: ApiKey | Row[Any]) -> ApiKeyOut:
    return ApiKeyOut.model_validate(
        {**{c: getattr(key, c) for c in ApiKeyOut.model_fields if c != "status"}, "status": status_of(key)}
    )


async def create_key(session: AsyncSession, context: OrgContext, data: ApiKeyCreate) -> tuple[ApiKey, str]:
    principal = context.principal
    requested = scopes_role(data.scopes)
    if principal.kind == "api_key" and not principal.api_key_role().at_least(requested):
        raise Forbidden("An API key can only create keys that grant no more than it has itself.")
    key_id = new_id("key")
    secret = f"pk_{key_id.removeprefix('key_').lower()}_{secrets.token_urlsafe(32)}"
    key = ApiKey(
        id=key_id,
        organization_id=context.organization_id,
        name=data.name,
        key_hash=sha256_hex(secret),
        hint=secret[-4:],
        scopes=list(data.scopes),
        expires_at=utcnow() + timedelta(days=data.expires_in_days) if data.expires_in_days else None,
        created_by=context.actor_user_id,
    )
    session.add(key)
    await session.flush()
    return key, secret


async def get_key(session: AsyncSession, context: OrgContext, key_id: str) -> ApiKey:
    return await get_owned(session, ApiKey, key_id, context.organization_id, "API key")


async def read_key(session: AsyncSession, context: OrgContext, key_id: str) -> Row[Any]:
    """The key's row, to answer it (read only)."""
    return await read_owned(session, ApiKey, key_id, context.organization_id, "API key")


async def revoke_key(session: AsyncSession, context: OrgContext, key_id: str) -> ApiKey:
    key = await get_key(session, context, key_id)
    if key.revoked_at is not None:
        raise Conflict(f"API key {key_id!r} is already revoked.")
    key.revoked_at = utcnow()
    await session.flush()
    return key


async def revoke_keys_beyond(
    session: AsyncSession, organization_id: str, creator_id: str, role: Role | None
) -> list[str]:
    """Revoke the active keys ``creator_id`` made in the organization that grant more than ``role``
    (all of them when ``role`` is None: the person left); the revoked keys' ids.

    A key must not outlive its creator's authority: a removed admin's admin key could otherwise add
    them back. Keys within the new role keep working; an admin makes a new key to replace one.
    """
    keys = (
        await session.scalars(
            select(ApiKey).where(
                ApiKey.organization_id == organization_id,
                ApiKey.created_by == creator_id,
                ApiKey.revoked_at.is_(None),
            )
        )
    ).all()
    now = utcnow()
    revoked: list[str] = []
    for key in keys:
        if role is None or scopes_role(key.scopes).rank > role.rank:
            key.revoked_at = now
            revoked.append(key.id)
    await session.flush()
    return sorted(revoked)


def keys_query(organization_id: str, status: str = "all") -> Select[ApiKey]:
    """The organization's keys: ``active`` (not revoked, not expired), ``revoked`` or ``all``."""
    stmt = scoped(ApiKey, organization_id)
    if status == "revoked":
        stmt = stmt.where(ApiKey.revoked_at.is_not(None))
    elif status == "active":
        now = utcnow()
        stmt = stmt.where(ApiKey.revoked_at.is_(None)).where(
            (ApiKey.expires_at.is_(None)) | (ApiKey.expires_at > now)
        )
    return stmt
