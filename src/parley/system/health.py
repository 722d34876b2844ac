"""Readiness checks: the database (required) and Redis (optional; its loss only degrades).

``redis_health`` speaks RESP directly (``AUTH``/``PING``) so readiness needs no Redis client library;
the distributed queue's own client takes over when it is installed (``parley.kit.redis``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlsplit

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from parley.config import Settings
    from parley.kit.db import Database

CHECK_TIMEOUT = 2.0

Check = Literal["ok", "unreachable", "not_configured"]


def _command(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        raw = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


async def _ping(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return False
    context = ssl.create_default_context() if parts.scheme == "rediss" else None
    reader, writer = await asyncio.open_connection(
        parts.hostname or "127.0.0.1", parts.port or 6379, ssl=context
    )
    try:
        if parts.password is not None:
            username = unquote(parts.username) if parts.username else None
            auth = (
                ("AUTH", username, unquote(parts.password)) if username else ("AUTH", unquote(parts.password))
            )
            writer.write(_command(*auth))
            if not (await reader.readline()).startswith(b"+OK"):
                return False
        writer.write(_command("PING"))
        await writer.drain()
        return (await reader.readline()).startswith(b"+PONG")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def redis_health(settings: Settings) -> bool | None:
    """True when Redis answers PING, False when it does not, None when no Redis is configured."""
    if not settings.redis_url:
        return None
    try:
        return await asyncio.wait_for(_ping(settings.redis_url), timeout=CHECK_TIMEOUT)
    except (OSError, TimeoutError, ssl.SSLError, ValueError):
        return False


async def database_health(database: Database) -> bool:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT * 2):
            async with database.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError):
        return False
    return True
