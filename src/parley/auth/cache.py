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
import json
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import event, inspect
from sqlalchemy.orm import ORMExecuteState, Session

from parley.auth.models import ApiKey, Membership, Organization, User
from parley.kit.bus import LOCAL_TTL as LOCAL_TTL  # the lifetimes, named here as before
from parley.kit.bus import LONG_TTL as LONG_TTL
from parley.kit.bus import SHORT_TTL as SHORT_TTL
from parley.kit.bus import BusCache, InvalidationBus
from parley.kit.metrics import IDENTITY_CACHE, IDENTITY_INVALIDATIONS

if TYPE_CHECKING:
    from parley.kit.db import Database

MAX_ENTRIES = 100_000
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

    def to_dict(self) -> dict[str, Any]:
        """The changes as the bus publishes them (JSON values)."""
        return {
            "keys": sorted(self.keys),
            "members": sorted(list(m) for m in self.members),
            "organizations": sorted(self.organizations),
            "users": sorted(self.users),
            "everything": self.everything,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: str | bytes) -> Changes:
        return cls.from_dict(json.loads(data))

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> Changes:
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


class IdentityCache(BusCache):
    """API keys and membership roles of one database, with explicit invalidation (module docstring).

    Its lifetime (:attr:`ttl`) follows the state of its bus (kit/bus.py)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.generation = 0
        # Entries hold the time they were stored: the lifetime that applies is the one of the moment
        # they are read, so entries stored while subscribed expire within 1 s once Redis is lost.
        self._keys: dict[str, tuple[float, KeySnapshot]] = {}
        self._roles: dict[tuple[str, str], tuple[float, str | None]] = {}
        # Entries being read from the database: the generation the read began in and its answer.
        self._reading: dict[tuple[str, ...], tuple[int, asyncio.Future[Any]]] = {}

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

    async def read_role(
        self, user_id: str, organization_id: str, read: Callable[[], Awaitable[str | None]]
    ) -> str | None:
        """The role ``read`` from the database, read once for every request that misses it meanwhile
        (:meth:`_read_once`), and stored."""
        role, generation = await self._read_once(("role", user_id, organization_id), read)
        self.put_role(user_id, organization_id, role, generation)
        return cast(str | None, role)

    async def read_key(
        self, key_id: str, read: Callable[[], Awaitable[KeySnapshot | None]]
    ) -> tuple[KeySnapshot | None, int]:
        """The key ``read`` from the database, read once for every request that misses it meanwhile
        (:meth:`_read_once`), and the generation the read began in (the caller stores the snapshot:
        the request that read the row notes the key's use first)."""
        snapshot, generation = await self._read_once(("key", key_id), read)
        return cast(KeySnapshot | None, snapshot), generation

    async def _read_once(self, slot: tuple[str, ...], read: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
        """``read()``'s answer for ``slot`` and the generation its read began in.

        When an entry expired under load, every request in flight read it at the same moment: a burst
        of ORM reads that stalled the worker for a few hundred milliseconds each time the lifetime ran
        out (docs/benchmarks.md, twelfth round). The first request reads it; one that misses the same
        entry while that read runs takes its answer, provided nothing was invalidated since it began
        (else it reads on its own, as it does when the first read fails or its request is cancelled).
        """
        reading = self._reading.get(slot)
        if reading is not None and reading[0] == self.generation:
            answer = await asyncio.shield(reading[1])
            if answer is not MISS:
                return answer, reading[0]
        generation = self.generation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._reading[slot] = (generation, future)
        try:
            answer = await read()
        except BaseException:
            future.set_result(MISS)  # the others read on their own
            raise
        finally:
            if self._reading.get(slot, (0, None))[1] is future:
                del self._reading[slot]
        future.set_result(answer)
        return answer, generation

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
            self.publish(changes.to_dict())

    def received(self, changes: Any) -> None:
        """Another process committed ``changes`` (through the bus): drop them here."""
        decoded = Changes.from_dict(changes)
        _RECEIVED.inc()
        self.invalidate(decoded)


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


# --- distributed mode: invalidations through Redis pub/sub (kit/bus.py) -----------------------------


class IdentityBus(InvalidationBus):
    """Publishes this process's identity changes on ``<prefix>:identity`` and applies every other
    process's."""

    name = "identity"
