"""Resolving credentials into principals: users from JWT claims, API keys from their hash."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.cache import IdentityCache, KeySnapshot
from parley.auth.models import ApiKey, Membership, Organization, User
from parley.auth.principal import Principal
from parley.auth.roles import Role
from parley.auth.tokens import ADMIN_ROLE_CLAIM, Claims
from parley.kit.crypto import constant_time_equals, sha256_hex
from parley.kit.db import utcnow
from parley.kit.errors import Unauthorized
from parley.kit.ids import new_id
from parley.kit.metrics import AUTH_FAILURES

API_KEY_PREFIX = "pk_"
_LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class _KnownUser:
    user_id: str
    email: str | None
    name: str | None
    expires: float


class KnownUsers:
    """Users whose stored row already matches their token, so the hot path skips the lookup.

    Keyed by subject and holding the stored profile. Only rows read back unchanged from the database
    are remembered (never a row this request inserted or updated, whose transaction may still roll
    back); entries expire so the map stays small and fresh.
    """

    def __init__(self, ttl_seconds: float = 60.0, max_entries: int = 50_000) -> None:
        self.ttl = ttl_seconds
        self.max_entries = max_entries
        self._entries: dict[str, _KnownUser] = {}
        self._reading: dict[str, asyncio.Future[None]] = {}  # subjects whose row a request is reading

    async def after_read_under_way(self, subject: str) -> bool:
        """Wait for the end of a read of ``subject``'s row that another request has under way: True
        when there was one (then :meth:`get` may know the user). When an entry expired under load,
        every request in flight read the row at the same moment; now one does and the others wait."""
        reading = self._reading.get(subject)
        if reading is None:
            return False
        await asyncio.shield(reading)
        return True

    def reading(self, subject: str) -> Callable[[], None]:
        """Note that this request reads ``subject``'s row; call what it returns when it is done."""
        under_way: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reading[subject] = under_way

        def done() -> None:
            if self._reading.get(subject) is under_way:
                del self._reading[subject]
            under_way.set_result(None)

        return done

    def get(self, claims: Claims) -> _KnownUser | None:
        entry = self._entries.get(claims.subject)
        if entry is None or entry.expires < time.monotonic():
            return None
        if (claims.email and claims.email != entry.email) or (claims.name and claims.name != entry.name):
            return None  # the profile changed: take the slow path, which updates the row
        return entry

    def remember(self, subject: str, user: User) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[subject] = _KnownUser(user.id, user.email, user.name, time.monotonic() + self.ttl)

    def forget(self, subject: str) -> None:
        self._entries.pop(subject, None)


def _user_principal(
    user_id: str, email: str | None, name: str | None, claims: Claims, admin_subjects: list[str]
) -> Principal:
    return Principal(
        kind="user",
        id=user_id,
        subject=claims.subject,
        email=email,
        name=name,
        is_platform_admin=claims.subject in admin_subjects or ADMIN_ROLE_CLAIM in claims.roles,
    )


async def user_from_claims(
    session: AsyncSession, claims: Claims, admin_subjects: list[str], known: KnownUsers | None = None
) -> Principal:
    if known is None:
        return await _user_from_row(session, claims, admin_subjects, None)
    entry = known.get(claims)
    if entry is None and await known.after_read_under_way(claims.subject):
        entry = known.get(claims)
    if entry is not None:
        return _user_principal(entry.user_id, entry.email, entry.name, claims, admin_subjects)
    done = known.reading(claims.subject)
    try:
        return await _user_from_row(session, claims, admin_subjects, known)
    finally:
        done()


async def _user_from_row(
    session: AsyncSession, claims: Claims, admin_subjects: list[str], known: KnownUsers | None
) -> Principal:
    """The user of ``claims`` as stored (created, or its profile updated, when the token says more)."""
    user = await session.scalar(select(User).where(User.subject == claims.subject))
    changed = True
    if user is None:
        user = User(id=new_id("usr"), subject=claims.subject, email=claims.email, name=claims.name)
        try:
            async with session.begin_nested():
                session.add(user)
        except IntegrityError:
            # A concurrent first request created the same user; use that row.
            user = await session.scalar(select(User).where(User.subject == claims.subject))
            if user is None:  # pragma: no cover - the unique violation guarantees the row exists
                raise
    elif (claims.email and claims.email != user.email) or (claims.name and claims.name != user.name):
        user.email = claims.email or user.email
        user.name = claims.name or user.name
    else:
        changed = False
    if known is not None:
        if changed:
            known.forget(claims.subject)
        else:
            known.remember(claims.subject, user)
    return _user_principal(user.id, user.email, user.name, claims, admin_subjects)


def split_api_key(token: str) -> tuple[str, str] | None:
    """``pk_<ulid>_<secret>`` → (key id, whole token); None when it is not shaped like a key."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "pk" or len(parts[1]) != 26 or len(parts[2]) < 20:
        return None
    return f"key_{parts[1].upper()}", token


def _last_use_due(last_used_at: datetime | None, now: datetime) -> bool:
    return last_used_at is None or now - last_used_at > _LAST_USED_RESOLUTION


async def principal_from_api_key(
    session: AsyncSession, token: str, cache: IdentityCache | None = None
) -> Principal:
    split = split_api_key(token)
    if split is None:
        AUTH_FAILURES.labels("api_key").inc()
        raise Unauthorized("The API key is malformed.")
    key_id, whole = split
    now = utcnow()
    snapshot = cache.key(key_id) if cache is not None else None
    key: ApiKey | None = None  # the row, when this request read it
    generation = 0
    if snapshot is None or _last_use_due(snapshot.last_used_at, now):
        # Not cached, or its last use is due to be noted: read the row, once for all the requests
        # that miss it meanwhile (the one that read it notes the use below).
        async def read() -> KeySnapshot | None:
            nonlocal key
            key = await session.get(ApiKey, key_id)
            return KeySnapshot.of(key) if key is not None else None

        if cache is None:
            snapshot = await read()
        else:
            snapshot, generation = await cache.read_key(key_id, read)
    # Compare even when the row is missing, so timing does not reveal which key ids exist.
    expected = snapshot.key_hash if snapshot is not None else "0" * 64
    if not constant_time_equals(sha256_hex(whole), expected) or snapshot is None:
        AUTH_FAILURES.labels("api_key").inc()
        raise Unauthorized("The API key is not valid.")
    if snapshot.revoked_at is not None:
        AUTH_FAILURES.labels("api_key_revoked").inc()
        raise Unauthorized("The API key has been revoked.")
    if snapshot.expires_at is not None and snapshot.expires_at <= now:
        AUTH_FAILURES.labels("api_key_expired").inc()
        raise Unauthorized("The API key has expired.")
    if key is not None:
        if _last_use_due(key.last_used_at, now):
            key.last_used_at = now  # written with this request's transaction
            snapshot = replace(snapshot, last_used_at=now)
        if cache is not None:
            # Stored now, not after the commit: the requests that arrive meanwhile neither read the
            # row nor note the same use again. Should this transaction not commit, the use is noted
            # by the first request after the entry's lifetime (≤ 30 s).
            cache.put_key(snapshot, generation)
    return Principal(
        kind="api_key",
        id=snapshot.id,
        name=snapshot.name,
        api_key_organization_id=snapshot.organization_id,
        scopes=snapshot.scopes,
    )


async def memberships_of(session: AsyncSession, principal: Principal) -> list[tuple[str, str, Role]]:
    """The organizations (id, name) the principal can act in, with its role in each: an API key's own
    organization, or a user's memberships by organization id."""
    if principal.kind == "api_key":
        org = await session.get(Organization, principal.api_key_organization_id)
        return [(org.id, org.name, principal.api_key_role())] if org else []
    rows = await session.execute(
        select(Organization.id, Organization.name, Membership.role)
        .join(Membership, Membership.organization_id == Organization.id)
        .where(Membership.user_id == principal.id)
        .order_by(Organization.id)
    )
    return [(i, n, Role(r)) for i, n, r in rows]
