"""Redis for distributed mode: clients, key names and a health check.

Everything Parley keeps in Redis (the job queue, rate-limit windows, the live-session registry and the
control channels) is named under ``PARLEY_REDIS_PREFIX`` (default ``parley``), so several deployments
or test runs can share one server. Without ``PARLEY_REDIS_URL`` nothing here is used.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError

from parley.config import Settings

CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = 5.0


def redis_client(
    settings: Settings,
    *,
    command_timeout: float | None = COMMAND_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> Redis:
    """A new client (a connection pool) for ``PARLEY_REDIS_URL``; the caller closes it (``aclose``)."""
    if not settings.redis_url:
        raise RuntimeError("PARLEY_REDIS_URL is not set")
    client: Redis = Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=connect_timeout,
        socket_timeout=command_timeout,
        health_check_interval=30,
    )
    return client


def key(settings: Settings, *parts: str) -> str:
    """A Redis key or channel name under the configured prefix, e.g. ``parley:live:ses_...``."""
    return ":".join((settings.redis_prefix, *parts))


def redacted_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for logs and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def process_id() -> str:
    """This process's name in the live-session registry: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


async def redis_health(settings: Settings) -> bool | None:
    """True when Redis answers PING (within a second), False when it does not, None without Redis."""
    if not settings.redis_url:
        return None
    try:
        client = Redis.from_url(settings.redis_url, socket_connect_timeout=1.0, socket_timeout=1.0)
    except ValueError:  # not a redis:// URL
        return False
    try:
        return bool(await client.ping())
    except (RedisError, OSError, TimeoutError):
        return False
    finally:
        await client.aclose()
