"""Readiness checks: the database (required) and Redis (optional; its loss only degrades).

Redis is checked by ``parley.kit.redis.redis_health`` (re-exported here for the readiness route).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from parley.kit.redis import redis_health

if TYPE_CHECKING:
    from parley.kit.db import Database

__all__ = ["CHECK_TIMEOUT", "Check", "database_health", "redis_health"]

CHECK_TIMEOUT = 2.0

Check = Literal["ok", "unreachable", "not_configured"]


async def database_health(database: Database) -> bool:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT * 2):
            async with database.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError):
        return False
    return True
