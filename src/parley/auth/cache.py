"""The identity cache: what every request reads and rarely changes, kept in the process.

Two things are cached, both keyed by ids that never repeat (ULIDs):

- an API key's row as authentication needs it (hash, organization, scopes, revocation, expiry);
- a user's role in an organization, or the fact that they have none.

**Invalidation is explicit.** Every commit that touches ``api_keys``, ``memberships``, ``organizations``
or ``users`` (through the ORM or a bulk ``UPDATE``/``DELETE`` of those tables) is noticed by the
session events below and, once the transaction has committed, drops the entries it concerns in this
process at once and, in distributed mode (``PARLEY_REDIS_URL``), publishes them on the Redis channel
``<prefix>:identity``; every other process drops them as the message arrives (milliseconds; the bound we
document and measure is 1 s). Nothing needs to remember to invalidate: a new write path is covered.

**Lifetimes.** An entry lives :data:`LONG_TTL` (30 s) while this process is subscribed to the channel;
:data:`SHORT_TTL` (1 s) in distributed mode while Redis cannot be reached (answers stay correct within
that second; never a 500); and :data:`LOCAL_TTL` (5 s) without Redis, where this process's own changes
apply at once and changes another process makes to the same database (``parley serve --workers N``
without Redis, a script) are seen within 5 s. The lifetime is the one in force when an entry is read,
so entries stored while subscribed expire within a second once Redis is lost. When the subscription
comes back the cache is emptied, since messages may have been missed.

**No stale write-back.** A value read from the database is stored only if no invalidation arrived
since the read began (a generation counter), so a request racing a revocation cannot put the old row
back into the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from redis.exceptions import RedisError
from sqlalchemy import event, inspect
from sqlalchemy.orm import ORMExecuteState, Session

from parley.auth.models import ApiKey, Membership, Organization, User
from parley.kit.metrics import IDENTITY_CACHE, IDENTITY_INVALIDATIONS

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from parley.config import Settings
    from parley.kit.db import Database

log = structlog.get_logger("parley.auth.cache")

LONG_TTL = 30.0  # seconds an entry lives while invalidations arrive through Redis
LOCAL_TTL = 5.0  # without Redis: this process's changes apply at once, other processes' within 5 s
SHORT_TTL = 1.0  # distributed mode while Redis cannot be reached
MAX_ENTRIES = 100_000
PUBLISH_TIMEOUT = 0.5
RECONNECT_DELAY = 0.5
_IDENTITY_TABLES = frozenset({"api_keys", "memberships", "organizations", "users"})
# Changing only these columns of an API key does not change what authentication decides.
_KEY_BOOKKEEPING = frozenset({"last_used_at", "updated_at"})
_CHANGES = "identity_changes"
_HIT, _MISS = IDENTITY_CACHE.labels("hit"), IDENTITY_CACHE.labels("miss")
_MADE_HERE, _RECEIVED = IDENTITY_INVALIDATIONS.labels("local"), IDENTITY_INVALIDATIONS.labels("redis")


@dataclass(frozen=True)
class KeySnapshot:
    """What authenticating with an API key needs of its row."""

    id: str
    organization_id: str
    name: str
    key_hash: str
    scopes: frozenset[str]
    revoked_at: datetime | None
    expires_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def of(cls, key: ApiKey) -> KeySnapshot:
        return cls(
            key.id,
            key.organization_id,
            key.name,
            key.key_hash,
            frozenset(key.scopes),
            key.revoked_at,
            key.expires_at,
            key.last_used_at,
        )


@dataclass
class Changes:
    """What a transaction changed of the identity tables (``everything`` after a bulk statement)."""

    keys: set[str] = field(default_factory=set)
    members: set[tuple[str, str]] = field(default_factory=set)  # (user id, organization id)
    organizations: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.everything or self.keys or self.members or self.organizations or self.users)

    def to_json(self) -> str:
        return json.dumps(
            {
                "keys": sorted(self.keys),
                "members": sorted(list(m) for m in self.members),
                "organizations": sorted(self.organizations),
                "users": sorted(self.users),
                "everything": self.everything,
            }
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Changes:
        body = json.loads(data)
        return cls(
            keys={str(k) for k in body.get("keys", [])},
            members={(str(u), str(o)) for u, o in body.get("members", [])},
            organizations={str(o) for o in body.get("organizations", [])},
            users={str(u) for u in body.get("users", [])},
            everything=bool(body.get("everything", False)),
        )


class _Miss:
    pass


MISS: Any = _Miss()  # what :meth:`IdentityCache.role` answers when it does not know


class IdentityCache:
    """API keys and membership roles of one database, with explicit invalidation (module docstring)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.generation = 0
        self.subscribed = False  # True while invalidations reach this process through Redis
        self.distributed = False  # True once a Redis bus serves this cache (PARLEY_REDIS_URL)
        self.bus: IdentityBus | None = None
        # Entries hold the time they were stored: the lifetime that applies is the one of the moment
        # they are read, so entries stored while subscribed expire within 1 s once Redis is lost.
        self._keys: dict[str, tuple[float, KeySnapshot]] = {}
        self._roles: dict[tuple[str, str], tuple[float, str | None]] = {}

    @property
    def ttl(self) -> float:
        if self.subscribed:
            return LONG_TTL
        return SHORT_TTL if self.distributed else LOCAL_TTL

    # --- reading ------------------------------------------------------------------------------------

    def key(self, key_id: str) -> KeySnapshot | None:
        entry = self._keys.get(key_id)
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            _MISS.inc()
            return None
        _HIT.inc()
        return entry[1]

    def role(self, user_id: str, organization_id: str) -> Any:
        """The cached role (a string), None for "not a member", or :data:`MISS`."""
        entry = self._roles.get((user_id, organization_id))
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            _MISS.inc()
            return MISS
        _HIT.inc()
        return entry[1]

    # --- storing (only when nothing was invalidated since the read began) -------------------------

    def put_key(self, snapshot: KeySnapshot, generation: int) -> None:
        if generation != self.generation:
            return
        if len(self._keys) >= self.max_entries:
            self._keys.clear()
        self._keys[snapshot.id] = (time.monotonic(), snapshot)

    def put_role(self, user_id: str, organization_id: str, role: str | None, generation: int) -> None:
        if generation != self.generation:
            return
        if len(self._roles) >= self.max_entries:
            self._roles.clear()
        self._roles[(user_id, organization_id)] = (time.monotonic(), role)

    # --- invalidation -------------------------------------------------------------------------------

    def invalidate(self, changes: Changes) -> None:
        """Drop what ``changes`` concern in this process (and make reads in flight not store)."""
        self.generation += 1
        if changes.everything:
            self.clear()
            return
        for key_id in changes.keys:
            self._keys.pop(key_id, None)
        for member in changes.members:
            self._roles.pop(member, None)
        if changes.organizations:
            orgs = changes.organizations
            self._keys = {k: v for k, v in self._keys.items() if v[1].organization_id not in orgs}
            self._roles = {m: v for m, v in self._roles.items() if m[1] not in orgs}
        if changes.users:
            users = changes.users
            self._roles = {m: v for m, v in self._roles.items() if m[0] not in users}

    def clear(self) -> None:
        self.generation += 1
        self._keys.clear()
        self._roles.clear()

    def committed(self, changes: Changes) -> None:
        """A transaction of this process committed ``changes``: drop them here, tell the others."""
        _MADE_HERE.inc()
        self.invalidate(changes)
        if self.bus is not None:
            self.bus.publish(changes)


# One cache per database, found from any session on it (a unit of work's, the tests', a script's):
# keyed by the engine's connection pool, which the writing engine (execution options) shares.
_CACHES: weakref.WeakKeyDictionary[Any, IdentityCache] = weakref.WeakKeyDictionary()


def identity_cache_of(database: Database) -> IdentityCache:
    """The database's identity cache (one per connection pool, made on first use)."""
    pool = database.engine.sync_engine.pool
    cache = _CACHES.get(pool)
    if cache is None:
        cache = _CACHES[pool] = IdentityCache()
    return cache


def _cache_of(session: Session) -> IdentityCache | None:
    bind = session.bind
    engine = getattr(bind, "engine", None)
    return _CACHES.get(engine.pool) if engine is not None else None


# --- noticing changes: session events ---------------------------------------------------------------


def _pending(session: Session) -> Changes:
    changes: Changes | None = session.info.get(_CHANGES)
    if changes is None:
        changes = session.info[_CHANGES] = Changes()
    return changes


def _key_changed(key: ApiKey) -> bool:
    state = inspect(key)
    return any(attr.key not in _KEY_BOOKKEEPING and attr.history.has_changes() for attr in state.attrs)


@event.listens_for(Session, "after_flush")
def _note_flushed(session: Session, _context: Any) -> None:
    changes: Changes | None = None
    for obj in (*session.new, *session.dirty, *session.deleted):
        if isinstance(obj, ApiKey):
            if obj in session.dirty and not _key_changed(obj):
                continue
            changes = changes or _pending(session)
            changes.keys.add(obj.id)
        elif isinstance(obj, Membership):
            changes = changes or _pending(session)
            changes.members.add((obj.user_id, obj.organization_id))
        elif isinstance(obj, Organization):
            if obj in session.deleted:
                changes = changes or _pending(session)
                changes.organizations.add(obj.id)
        elif isinstance(obj, User) and obj in session.deleted:
            changes = changes or _pending(session)
            changes.users.add(obj.id)


@event.listens_for(Session, "do_orm_execute")
def _note_bulk(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    session = state.session
    table = getattr(state.statement, "table", None)
    if getattr(table, "name", None) in _IDENTITY_TABLES:
        if getattr(table, "name", None) == "users" and state.is_update:
            return  # profile columns only (an avatar removed): nothing authentication decides on
        _pending(session).everything = True


@event.listens_for(Session, "after_commit")
def _apply_committed(session: Session) -> None:
    changes: Changes | None = session.info.pop(_CHANGES, None)
    if not changes:
        return
    cache = _cache_of(session)
    if cache is not None:
        cache.committed(changes)


@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:
        session.info.pop(_CHANGES, None)


# --- distributed mode: invalidations through Redis pub/sub -------------------------------------------


class IdentityBus:
    """Publishes this process's identity changes and applies every other process's."""

    def __init__(self, cache: IdentityCache, redis: Redis, channel: str) -> None:
        self.cache = cache
        self.redis = redis
        self.channel = channel
        self.sender = os.urandom(8).hex()
        self.published = 0
        self.publish_failures = 0
        self._listener: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self.subscribed_event = asyncio.Event()
        self._warned_down = False

    @classmethod
    def from_settings(cls, cache: IdentityCache, settings: Settings) -> IdentityBus:
        from parley.kit.redis import key, redis_client

        # No socket timeout on the subscriber's reads (it waits for messages); connects fail fast.
        client = redis_client(settings, command_timeout=None, connect_timeout=1.0)
        return cls(cache, client, key(settings, "identity"))

    def start(self) -> None:
        self.cache.bus = self
        self.cache.distributed = True
        self._listener = asyncio.create_task(self._listen(), name="identity-cache-listener")

    async def stop(self) -> None:
        if self.cache.bus is self:
            self.cache.bus = None
        self.cache.subscribed = False
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        for task in list(self._publishing):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()

    def publish(self, changes: Changes) -> None:
        try:
            task = asyncio.get_running_loop().create_task(self._publish(changes))
        except RuntimeError:  # no loop (a synchronous commit): the short lifetime bounds the others
            return
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, changes: Changes) -> None:
        body = json.dumps({"sender": self.sender, "changes": json.loads(changes.to_json())})
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                await self.redis.publish(self.channel, body)
            self.published += 1
        except (RedisError, OSError, TimeoutError) as exc:
            self.publish_failures += 1
            log.warning(
                "identity_invalidation_unsent",
                detail="Redis cannot be reached; other processes see the change when their "
                "entries expire (1 s while their subscription is down too).",
                error_type=type(exc).__name__,
            )

    async def _listen(self) -> None:
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                # Messages may have been missed while unsubscribed: start from an empty cache.
                self.cache.clear()
                self.cache.subscribed = True
                self.subscribed_event.set()
                self._warned_down = False
                while True:
                    item = await pubsub.get_message(timeout=1.0)
                    if item is not None and item.get("type") == "message":
                        self._received(item["data"])
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, TimeoutError) as exc:
                if not self._warned_down:  # once per outage, not every reconnect attempt
                    self._warned_down = True
                    log.warning(
                        "identity_cache_listener_down",
                        detail="Redis cannot be reached; identity cache entries live 1 s until it is back.",
                        error_type=type(exc).__name__,
                    )
            finally:
                self.cache.subscribed = False
                self.subscribed_event.clear()
                with contextlib.suppress(RedisError, OSError, TimeoutError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(RECONNECT_DELAY)

    def _received(self, data: bytes | str) -> None:
        try:
            body = json.loads(data)
            if body.get("sender") == self.sender:
                return
            changes = Changes.from_json(json.dumps(body["changes"]))
        except (ValueError, KeyError, TypeError):
            log.warning("identity_invalidation_malformed")
            self.cache.clear()
            return
        _RECEIVED.inc()
        self.cache.invalidate(changes)
