"""The live-session registry: control messages reach the process holding a session's live stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from parley.config import Settings
from parley.sessions.registry import (
    HOLD_TTL,
    ControlMessage,
    LocalRegistry,
    RedisRegistry,
    registry_from_settings,
)
from tests.distributed.redis_env import REDIS_URL


class Inbox:
    def __init__(self) -> None:
        self.messages: list[ControlMessage] = []
        self.arrived = asyncio.Event()

    async def __call__(self, message: ControlMessage) -> None:
        self.messages.append(message)
        self.arrived.set()


@pytest.fixture
async def two_processes(
    tmp_path: Path, redis_prefix: str
) -> AsyncIterator[tuple[RedisRegistry, RedisRegistry]]:
    settings = Settings(data_dir=tmp_path, redis_url=REDIS_URL, redis_prefix=redis_prefix)
    a, b = registry_from_settings(settings), registry_from_settings(settings)
    assert isinstance(a, RedisRegistry) and isinstance(b, RedisRegistry)
    assert a.process_id != b.process_id
    await a.start()
    await b.start()
    await a.wait_subscribed()
    await b.wait_subscribed()
    yield a, b
    await a.stop()
    await b.stop()


async def test_a_message_sent_from_b_reaches_the_holder_a(
    two_processes: tuple[RedisRegistry, RedisRegistry],
) -> None:
    a, b = two_processes
    inbox = Inbox()
    await a.hold("ses_1", inbox)
    assert await b.holder("ses_1") == a.process_id
    assert await b.control("ses_1", {"action": "end", "reason": "ended_by_client"})
    await asyncio.wait_for(inbox.arrived.wait(), 10)
    assert inbox.messages == [{"action": "end", "reason": "ended_by_client"}]


async def test_the_holder_itself_delivers_directly(
    two_processes: tuple[RedisRegistry, RedisRegistry],
) -> None:
    a, _ = two_processes
    inbox = Inbox()
    await a.hold("ses_2", inbox)
    assert await a.control("ses_2", {"action": "voice", "voiced": False})
    assert inbox.messages == [{"action": "voice", "voiced": False}]


async def test_released_and_unknown_sessions_have_no_holder(
    two_processes: tuple[RedisRegistry, RedisRegistry],
) -> None:
    a, b = two_processes
    inbox = Inbox()
    await a.hold("ses_3", inbox)
    await a.release("ses_3", inbox)
    assert await b.holder("ses_3") is None
    assert not await b.control("ses_3", {"action": "end"})
    assert not await b.control("ses_unknown", {"action": "end"})
    assert inbox.messages == []


async def test_a_registration_expires_and_is_renewed_while_held(
    two_processes: tuple[RedisRegistry, RedisRegistry],
) -> None:
    a, _ = two_processes
    await a.hold("ses_4", Inbox())
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        ttl = await client.ttl(a._key("ses_4"))
        assert 0 < ttl <= HOLD_TTL  # a process that dies leaves no registration for long
    finally:
        await client.aclose()


async def test_releasing_does_not_remove_another_processs_registration(
    two_processes: tuple[RedisRegistry, RedisRegistry],
) -> None:
    a, b = two_processes
    first, second = Inbox(), Inbox()
    await a.hold("ses_5", first)
    await b.hold("ses_5", second)  # the caller reconnected through B
    await a.release("ses_5", first)
    assert await a.holder("ses_5") == b.process_id


async def test_local_registry() -> None:
    registry = LocalRegistry()
    inbox = Inbox()
    await registry.hold("ses_6", inbox)
    assert await registry.holder("ses_6") == "local"
    assert await registry.control("ses_6", {"action": "end"})
    assert inbox.messages == [{"action": "end"}]

    async def broken(message: ControlMessage) -> None:
        raise RuntimeError("boom")

    await registry.hold("ses_7", broken)
    assert await registry.control("ses_7", {"action": "end"})  # delivered; the failure is logged
    await registry.release("ses_6", inbox)
    assert not await registry.control("ses_6", {"action": "end"})


def test_without_redis_the_registry_is_local(tmp_path: Path) -> None:
    assert type(registry_from_settings(Settings(data_dir=tmp_path))) is LocalRegistry
