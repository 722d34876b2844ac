"""``kit.orgcache.cached_item``: items of an organization's map, loaded on first use, kept until a change
of the kind commits, never kept when a change committed after the reading transaction began, and never
answering for another organization."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import Database, unit_of_work
from parley.kit.orgcache import cached_item, org_cache_of_database

KIND = "tests.items"


async def test_items_are_kept_per_organization_until_a_change_and_a_raced_read_is_not(
    database: Database,
) -> None:
    cache = org_cache_of_database(database, distributed=False)
    loads: list[tuple[str, int]] = []

    async def item(
        session: AsyncSession, org: str, key: int, meanwhile: Callable[[], None] | None = None
    ) -> str:
        async def load() -> str:
            loads.append((org, key))
            if meanwhile is not None:
                meanwhile()  # a change of the kind commits while this read runs
            return f"{org}:{key}"

        return await cached_item(session, KIND, org, key, load)

    async with unit_of_work(database, write=False) as session:
        await session.execute(text("SELECT 1"))  # the transaction has begun
        raced = await item(session, "org_a", 1, lambda: cache.invalidate({(KIND, "org_a")}))
        assert raced == "org_a:1"
        assert await item(session, "org_a", 1) == "org_a:1"  # began before the change: not kept
    assert loads == [("org_a", 1), ("org_a", 1)]

    async with unit_of_work(database, write=False) as session:
        assert [await item(session, "org_a", key) for key in (1, 2, 1, 2)] == ["org_a:1", "org_a:2"] * 2
        assert await item(session, "org_b", 1) == "org_b:1"  # another organization's own item
    assert loads[2:] == [("org_a", 1), ("org_a", 2), ("org_b", 1)]

    cache.invalidate({(KIND, "org_a")})  # a change of org_a's rows committed: its items go, org_b's stay
    async with unit_of_work(database, write=False) as session:
        assert await item(session, "org_a", 2) == "org_a:2"
        assert await item(session, "org_b", 1) == "org_b:1"
    assert loads[5:] == [("org_a", 2)]
