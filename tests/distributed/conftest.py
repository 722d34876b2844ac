from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.distributed import redis_env


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own on the test Redis database; its keys are deleted afterwards."""
    redis_env.require_redis()
    prefix = redis_env.new_prefix()
    try:
        yield prefix
    finally:
        redis_env.cleanup(prefix)
