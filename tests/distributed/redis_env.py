"""Redis for tests: the machine's server, a database number and a key prefix of the run's own.

``PARLEY_TEST_REDIS_URL`` names the server and database (default ``redis://127.0.0.1:6379/9``). Every
run (and every test that asks) gets a fresh prefix; :func:`cleanup` deletes what the prefix named,
including arq's ``arq:*:{prefix}:...`` job keys. Without a reachable server the tests skip with a
message, except with ``CI=true``, where they must run and an unreachable server is an error.
"""

from __future__ import annotations

import os
import uuid

import pytest
import redis

from tests import pg

REDIS_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


def require_redis() -> None:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        message = f"Redis at {REDIS_URL} is unreachable ({exc.__class__.__name__})"
        if pg.in_ci():
            pytest.fail(message + "; with CI=true the distributed tests must run.")
        pytest.skip(message)
    finally:
        client.close()


def new_prefix() -> str:
    return f"ptest-{uuid.uuid4().hex[:12]}"


def keys_of(prefix: str) -> list[bytes]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return list(client.scan_iter(match=f"*{prefix}*", count=1000))
    finally:
        client.close()


def cleanup(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
