"""A per-organization cache of rarely-changing configuration, invalidated after commit.

What a turn reads on every request and an organization changes rarely (its privacy settings first) is
kept in the process, keyed by ``(kind, organization id)`` so one organization's entries never answer
another's. A domain package declares a kind with :func:`watch` (the kind's name and the ORM classes
whose rows make it up; each has an ``organization_id`` column) and reads through :func:`cached` (one
value per organization) or :func:`cached_item` (a map per organization whose items are read by key).

**Invalidation is explicit and after commit.** The session events below note which organizations'
rows of a watched class a transaction inserts, updates or deletes (a bulk ``UPDATE``/``DELETE`` of a
watched table drops the whole kind; deleting an organization drops all its entries). Once the
transaction has committed the entries are dropped in this process, so the next request here sees the
change at once; a rolled-back transaction drops nothing and was never visible. Nothing needs to
remember to invalidate: a new write path (route, import, seed, GDPR erasure, organization deletion) is
covered because it writes through a session.

**Other processes.** With ``PARLEY_REDIS_URL`` the committed changes are also published on the Redis
channel ``<prefix>:org_config`` (:class:`OrgBus`, kit/bus.py): every other process drops them as the
message arrives (milliseconds; the bound we document is 1 s). Entries live :data:`LONG_TTL` (30 s)
while this process is subscribed, :data:`SHORT_TTL` (1 s) while Redis cannot be reached (answers stay
correct within that second), and :data:`LOCAL_TTL` (5 s) without Redis, where another process's change
is seen within 5 s. A change made in the database without a session (``psql``) is seen when the entries
expire. See docs/scale-out.md.

**No stale write-back.** A value read from the database is stored only if no invalidation happened
since the read began (a generation counter), so a read racing a change cannot put the old value back.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import ORMExecuteState, Session

from parley.kit.bus import LOCAL_TTL as LOCAL_TTL  # the lifetimes (kit/bus.py), named here too
from parley.kit.bus import LONG_TTL as LONG_TTL
from parley.kit.bus import SHORT_TTL as SHORT_TTL
from parley.kit.bus import BusCache, InvalidationBus
from parley.kit.metrics import ORG_CONFIG_INVALIDATIONS

if TYPE_CHECKING:
    from parley.kit.db import Database

MAX_ENTRIES = 50_000
_CHANGES = "org_cache_changes"
_BEGUN = "org_cache_generation"
_EVERY = "*"  # an organization id that never exists: "every organization" in a change set
_MADE_HERE, _RECEIVED = ORG_CONFIG_INVALIDATIONS.labels("local"), ORG_CONFIG_INVALIDATIONS.labels("redis")

T = TypeVar("T")

# kind -> watched ORM classes, and table name -> kind (for bulk statements)
_KINDS: dict[type[Any], str] = {}
_TABLES: dict[str, str] = {}
_ORGANIZATIONS_TABLE = "organizations"


def watch(kind: str, *classes: type[Any]) -> None:
    """Declare ``kind``: its entries are dropped when a row of one of ``classes`` changes."""
    for cls in classes:
        _KINDS[cls] = kind
        _TABLES[cls.__table__.name] = kind


class OrgCache(BusCache):
    """Values per ``(kind, organization id)`` of one database (module docstring); the lifetime
    (:attr:`ttl`) follows the state of its bus (kit/bus.py)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.generation = 0
        self._entries: dict[tuple[str, str], tuple[float, Any]] = {}

    def get(self, kind: str, organization_id: str) -> tuple[bool, Any]:
        entry = self._entries.get((kind, organization_id))
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            return False, None
        return True, entry[1]

    def put(self, kind: str, organization_id: str, value: Any, generation: int) -> None:
        if generation != self.generation:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[(kind, organization_id)] = (time.monotonic(), value)

    def invalidate(self, changes: set[tuple[str, str]]) -> None:
        """Drop ``(kind, organization)`` pairs; ``(kind, "*")`` drops a kind, ``("*", org)`` an org."""
        self.generation += 1
        for kind, org in changes:
            if kind == _EVERY or org == _EVERY:
                self._entries = {
                    (k, o): v
                    for (k, o), v in self._entries.items()
                    if not ((kind == _EVERY and o == org) or (org == _EVERY and k == kind))
                }
            else:
                self._entries.pop((kind, org), None)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()

    def committed(self, changes: set[tuple[str, str]]) -> None:
        """A transaction of this process committed ``changes``: drop them here, tell the others."""
        _MADE_HERE.inc()
        self.invalidate(changes)
        if self.bus is not None:
            self.publish(sorted([kind, org] for kind, org in changes))

    def received(self, changes: Any) -> None:
        """Another process committed ``changes`` (``[kind, organization]`` pairs, through the bus)."""
        if not isinstance(changes, list):
            raise TypeError("a list of [kind, organization] pairs")
        pairs: set[tuple[str, str]] = set()
        for pair in changes:
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise TypeError("a pair is [kind, organization], both strings")
            pairs.add((pair[0], pair[1]))
        _RECEIVED.inc()
        self.invalidate(pairs)


# One cache per database, keyed by the engine's connection pool (as the identity cache).
_CACHES: weakref.WeakKeyDictionary[Any, OrgCache] = weakref.WeakKeyDictionary()


def _pool_of(session: Session) -> Any:
    engine = getattr(session.bind, "engine", None)
    return engine.pool if engine is not None else None


def org_cache_of(session: Session) -> OrgCache | None:
    """The cache of the database ``session`` is bound to (made on first use; None when unbound)."""
    return _cache_of_pool(_pool_of(session))


def _cache_of_pool(pool: Any) -> OrgCache | None:
    if pool is None:
        return None
    cache = _CACHES.get(pool)
    if cache is None:
        cache = _CACHES[pool] = OrgCache()
    return cache


def org_cache_of_database(database: Database, *, distributed: bool) -> OrgCache:
    """The database's cache; ``distributed`` (PARLEY_REDIS_URL) makes entries live 1 s until its
    :class:`OrgBus` subscribes (then 30 s), else they live 5 s."""
    cache = _cache_of_pool(database.engine.sync_engine.pool)
    assert cache is not None
    cache.distributed = distributed
    return cache


async def cached(
    session: AsyncSession, kind: str, organization_id: str, load: Callable[[], Awaitable[T]]
) -> T:
    """The organization's ``kind`` value: from the cache, or ``load()`` (then stored)."""
    cache = org_cache_of(session.sync_session)
    if cache is None or session.sync_session.info.get(_CHANGES):
        return await load()  # unbound, or this transaction changed watched rows: read them
    found, value = cache.get(kind, organization_id)
    if found:
        return value  # type: ignore[no-any-return]
    # The generation when this transaction began: a change committed after its snapshot was taken
    # but before this read must not be stored either.
    generation = session.sync_session.info.get(_BEGUN, cache.generation)
    value = await load()
    cache.put(kind, organization_id, value, generation)
    return value


MAX_ITEMS = 1_000  # items of one organization's map (cached_item); past that they are read, not kept


async def cached_item(
    session: AsyncSession, kind: str, organization_id: str, key: Any, load: Callable[[], Awaitable[T]]
) -> T:
    """One item of the organization's ``kind`` map, loaded on first use (a value that is read by key,
    e.g. per flow version, and not all at once). The items live and are dropped with the map: any
    change of the kind's rows in the organization drops them all, after commit, as for :func:`cached`;
    an item read while an invalidation happened since the reading transaction began is not kept."""
    cache = org_cache_of(session.sync_session)
    if cache is None or session.sync_session.info.get(_CHANGES):
        return await load()
    found, items = cache.get(kind, organization_id)
    if found and key in items:
        return items[key]  # type: ignore[no-any-return]
    generation = session.sync_session.info.get(_BEGUN, cache.generation)
    value = await load()
    if generation == cache.generation:
        found, items = cache.get(kind, organization_id)
        if not found:
            items = {}
            cache.put(kind, organization_id, items, generation)
        if len(items) < MAX_ITEMS:
            items[key] = value
    return value


# --- noticing changes: session events ---------------------------------------------------------------


def _pending(session: Session) -> set[tuple[str, str]]:
    changes: set[tuple[str, str]] | None = session.info.get(_CHANGES)
    if changes is None:
        changes = session.info[_CHANGES] = set()
    return changes


@event.listens_for(Session, "after_flush")
def _note_flushed(session: Session, _context: Any) -> None:
    for obj in (*session.new, *session.dirty, *session.deleted):
        kind = _KINDS.get(type(obj))
        if kind is not None:
            org = getattr(obj, "organization_id", None)
            _pending(session).add((kind, org if isinstance(org, str) else _EVERY))
        elif obj in session.deleted and getattr(type(obj), "__tablename__", None) == _ORGANIZATIONS_TABLE:
            _pending(session).add((_EVERY, obj.id))


@event.listens_for(Session, "do_orm_execute")
def _note_bulk(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    name = getattr(getattr(state.statement, "table", None), "name", None)
    if name in _TABLES:
        _pending(state.session).add((_TABLES[name], _EVERY))
    elif name == _ORGANIZATIONS_TABLE and state.is_delete:
        _pending(state.session).update((kind, _EVERY) for kind in set(_TABLES.values()))


@event.listens_for(Session, "after_begin")
def _note_begun(session: Session, _transaction: Any, connection: Any) -> None:
    cache = _CACHES.get(connection.engine.pool)
    if cache is not None:
        session.info[_BEGUN] = cache.generation


@event.listens_for(Session, "after_commit")
def _apply_committed(session: Session) -> None:
    changes: set[tuple[str, str]] | None = session.info.pop(_CHANGES, None)
    if not changes:
        return
    cache = _CACHES.get(_pool_of(session)) if _pool_of(session) is not None else None
    if cache is not None:
        cache.committed(changes)


@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:
        session.info.pop(_CHANGES, None)


# --- distributed mode: invalidations through Redis pub/sub (kit/bus.py) -----------------------------


class OrgBus(InvalidationBus):
    """Publishes this process's configuration changes on ``<prefix>:org_config`` and applies every
    other process's."""

    name = "org_config"
