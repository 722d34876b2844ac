"""PostgreSQL for tests: a fresh database per test run (and per xdist worker) on the local server.

``PARLEY_TEST_PG_DSN`` names the server (default: the machine's trust-auth PostgreSQL on 127.0.0.1).
Without a reachable server the PostgreSQL variants skip with a message, except with ``CI=true``,
where they must run and an unreachable server is an error.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import asyncpg
import pytest

ADMIN_DSN = os.environ.get("PARLEY_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


async def _admin_execute(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def require_postgres() -> None:
    """Skip (locally) or fail (in CI) when the PostgreSQL server is unreachable."""
    try:
        asyncio.run(_admin_execute("SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        message = f"PostgreSQL at {ADMIN_DSN} is unreachable ({exc.__class__.__name__})"
        if in_ci():
            pytest.fail(message + "; with CI=true the PostgreSQL tests must run.")
        pytest.skip(message)


def worker_id() -> str:
    """The pytest-xdist worker running this process (``gw0``, ``gw1``, ...), or ``main`` without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def create_database(prefix: str, template: str | None = None) -> tuple[str, str]:
    """Create a fresh database, named with the worker and a uuid; return its name and its asyncpg URL.

    Parallel workers (``pytest -n 2``) each get databases of their own; the caller drops them. With
    ``template`` the new database is a copy of that one (which nobody may be connected to).
    """
    require_postgres()
    name = f"{prefix}_{worker_id()}_{uuid.uuid4().hex[:10]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    asyncio.run(_admin_execute(f'CREATE DATABASE "{name}"{copy}'))
    base = ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return name, f"{base}/{name}"


def drop_database(name: str) -> None:
    asyncio.run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


ENGINE_NAME = "postgresql"
