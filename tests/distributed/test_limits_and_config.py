"""Rate limits shared through Redis, failing open; the Redis settings and the health check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parley.config import ConfigError, Settings, prepare_settings
from parley.kit import ratelimit
from parley.kit.ratelimit import RedisLimiter, SlidingWindowLimiter, limiter_from_settings
from parley.kit.redis import redacted_url, redis_client, redis_health
from tests.distributed.redis_env import REDIS_URL
from tests.live import free_port


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, **values)  # type: ignore[arg-type]


async def test_two_limiters_share_one_window(tmp_path: Path, redis_prefix: str) -> None:
    settings = _settings(tmp_path, redis_url=REDIS_URL, redis_prefix=redis_prefix, rate_limit_per_minute=5)
    first, second = limiter_from_settings(settings), limiter_from_settings(settings)
    assert isinstance(first, RedisLimiter) and isinstance(second, RedisLimiter)
    try:
        decisions = [await (first if n % 2 else second).check("user:alice") for n in range(7)]
        assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
        assert 1 <= decisions[-1].retry_after <= 60
        assert (await second.check("user:bob")).allowed  # keys are separate
    finally:
        await first.aclose()
        await second.aclose()


async def test_per_scope_limits_and_peeks_share_the_redis_window(tmp_path: Path, redis_prefix: str) -> None:
    """The organization, address and failed-authentication limits use the same Redis windows."""
    settings = _settings(tmp_path, redis_url=REDIS_URL, redis_prefix=redis_prefix, rate_limit_per_minute=100)
    first, second = limiter_from_settings(settings), limiter_from_settings(settings)
    assert isinstance(first, RedisLimiter) and isinstance(second, RedisLimiter)
    try:
        counted = [await (first if n % 2 else second).check("authfail:10.0.0.1", limit=3) for n in range(3)]
        assert all(d.allowed for d in counted)
        blocked = await second.check("authfail:10.0.0.1", limit=3, peek=True)
        assert not blocked.allowed and 1 <= blocked.retry_after <= 60
        # a peek counts nothing: another key peeked many times stays allowed
        assert all([(await first.check("authfail:10.0.0.2", limit=1, peek=True)).allowed for _ in range(5)])
        assert (await first.check("authfail:10.0.0.2", limit=1)).allowed
    finally:
        await first.aclose()
        await second.aclose()


class _Warnings:
    """Stands in for the limiter module's logger: what it warned (the log's rendering is not the point)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


async def test_limiter_fails_open_with_a_warning_when_redis_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0", rate_limit_per_minute=1)
    limiter = limiter_from_settings(settings)
    warned = _Warnings()
    monkeypatch.setattr(ratelimit, "log", warned)
    try:
        decisions = [await limiter.check("user:alice") for _ in range(3)]
        assert all(d.allowed for d in decisions)  # fails open
        assert [event for event, _ in warned.events] == ["rate_limit_unavailable"]  # one, not one per request
        assert warned.events[0][1]["error_type"] == "ConnectionError"
    finally:
        await limiter.aclose()


def test_without_redis_the_limiter_stays_in_process(tmp_path: Path) -> None:
    assert isinstance(limiter_from_settings(_settings(tmp_path)), SlidingWindowLimiter)


async def test_in_process_limiter_answers_check(tmp_path: Path) -> None:
    limiter = SlidingWindowLimiter(2)
    assert [(await limiter.check("k")).allowed for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://user:hunter2@example.com:6379/0", "must start with redis:// or rediss://"),
        ("hunter2@example.com", "must start with redis:// or rediss://"),
        ("redis://:hunter2@example.com:6379/zero", "must be a database number"),
        ("redis://:hunter2@example.com:notaport/0", "is not a valid URL"),
    ],
)
def test_bad_redis_urls_are_refused_without_showing_the_password(
    tmp_path: Path, url: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        prepare_settings(_settings(tmp_path, redis_url=url))
    assert message in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_good_redis_urls_are_kept(tmp_path: Path) -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://:secret@cache.example.com:6380", "redis://localhost"):
        assert prepare_settings(_settings(tmp_path, redis_url=url)).redis_url == url
    assert prepare_settings(_settings(tmp_path, redis_url="")).redis_url is None


def test_redacted_url_hides_the_password() -> None:
    assert redacted_url("redis://user:hunter2@host:6379/1") == "redis://user:***@host:6379/1"
    assert redacted_url("redis://host:6379/1") == "redis://host:6379/1"


async def test_redis_health(tmp_path: Path, redis_prefix: str) -> None:
    assert await redis_health(_settings(tmp_path)) is None
    assert await redis_health(_settings(tmp_path, redis_url=REDIS_URL)) is True
    assert await redis_health(_settings(tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0")) is False


async def test_redis_client_needs_a_url(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        redis_client(_settings(tmp_path))
