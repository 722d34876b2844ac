"""``kit.orgcache.OrgBus``: a change committed by one process's cache reaches another's through Redis;
entries live 30 s while subscribed, 1 s once Redis is lost, and the cache is emptied when the
subscription comes back. Two caches with a bus each on a private redis-server stand for two processes;
two ``parley serve`` processes are in tests/distributed/test_org_config_cache.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from parley.config import Settings
from parley.kit.orgcache import LONG_TTL, SHORT_TTL, OrgBus, OrgCache
from tests.ops.redis_server import RedisServer, redis_server

KIND = "privacy.redactor"


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition was not met")
        await asyncio.sleep(0.01)


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
async def pair(redis: RedisServer, tmp_path: Path) -> AsyncIterator[tuple[OrgBus, OrgBus]]:
    settings = Settings(data_dir=tmp_path, redis_url=redis.url, redis_prefix="orgbus-test")
    buses = (OrgBus.from_settings(OrgCache(), settings), OrgBus.from_settings(OrgCache(), settings))
    for bus in buses:
        bus.start()
    try:
        for bus in buses:
            await asyncio.wait_for(bus.subscribed_event.wait(), 10)
        yield buses
    finally:
        for bus in buses:
            await bus.stop()


async def test_a_committed_change_is_dropped_by_the_other_process(pair: tuple[OrgBus, OrgBus]) -> None:
    a, b = pair
    assert b.channel == "orgbus-test:org_config"
    assert a.cache.ttl == b.cache.ttl == LONG_TTL  # subscribed: other processes' changes arrive
    for org in ("org_1", "org_2"):
        b.cache.put(KIND, org, f"old {org}", b.cache.generation)
    b.cache.put("webhooks.subscribers", "org_1", "kept", b.cache.generation)
    reading = b.cache.generation  # a read in flight on B when the change arrives must not store

    a.cache.committed({(KIND, "org_1")})
    await _until(lambda: not b.cache.get(KIND, "org_1")[0])
    assert b.cache.get(KIND, "org_2") == (True, "old org_2")  # another organization's entry stays
    assert b.cache.get("webhooks.subscribers", "org_1") == (True, "kept")  # and another kind's
    b.cache.put(KIND, "org_1", "stale", reading)
    assert not b.cache.get(KIND, "org_1")[0]
    assert a.published == 1

    # a bulk statement drops the kind everywhere; deleting an organization drops all its kinds
    a.cache.committed({(KIND, "*")})
    await _until(lambda: not b.cache.get(KIND, "org_2")[0])
    assert b.cache.get("webhooks.subscribers", "org_1") == (True, "kept")
    a.cache.committed({("*", "org_1")})
    await _until(lambda: not b.cache.get("webhooks.subscribers", "org_1")[0])

    # A skips its own messages (its entries were dropped at commit, not again on arrival)
    a.cache.put(KIND, "org_3", "a's", a.cache.generation)
    b.cache.committed({(KIND, "org_9")})
    generation = a.cache.generation
    await _until(lambda: a.cache.generation > generation)  # B's message arrived at A
    assert a.cache.get(KIND, "org_3") == (True, "a's")


async def test_a_malformed_message_empties_the_cache(pair: tuple[OrgBus, OrgBus]) -> None:
    a, b = pair
    b.cache.put(KIND, "org_1", "value", b.cache.generation)
    for changes in ({"org_1": KIND}, [["only-a-kind"]], [[KIND, 1]], ["ab"]):
        await a.redis.publish(a.channel, json.dumps({"sender": a.sender, "changes": changes}))
        await _until(lambda: not b.cache.get(KIND, "org_1")[0])
        b.cache.put(KIND, "org_1", "value", b.cache.generation)
    assert b._listener is not None and not b._listener.done()  # still listening
    assert b.cache.ttl == LONG_TTL


async def test_without_redis_entries_live_one_second_and_come_back_empty(
    pair: tuple[OrgBus, OrgBus], redis: RedisServer
) -> None:
    a, b = pair
    b.cache.put(KIND, "org_1", "value", b.cache.generation)
    redis.stop()
    await _until(lambda: not b.cache.subscribed)
    assert b.cache.ttl == SHORT_TTL
    a.cache.put(KIND, "org_2", "value", a.cache.generation)
    a.cache.committed({(KIND, "org_2")})  # publishing fails quietly; the local drop happens
    await _until(lambda: a.publish_failures == 1)
    assert not a.cache.get(KIND, "org_2")[0] and a.published == 0

    redis.start()  # the same port: the listeners subscribe again and start from an empty cache
    await asyncio.wait_for(b.subscribed_event.wait(), 10)
    assert b.cache.ttl == LONG_TTL and not b.cache.get(KIND, "org_1")[0]
