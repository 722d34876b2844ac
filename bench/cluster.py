"""What the two-process benchmarks share (bench/identity_bench.py, bench/org_config_bench.py): `parley
serve` processes on one scratch PostgreSQL database and one Redis prefix, and their clean-up."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence

import jwt

REDIS_URL = os.environ.get("PARLEY_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
JWT_SECRET = "bench-secret-" + "x" * 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def token(sub: str) -> str:
    """A user's JWT for the servers (signed with :data:`JWT_SECRET`), valid for an hour."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "iat": now, "exp": now + 3600}, JWT_SECRET, algorithm="HS256")


def admin(sql: str) -> None:
    """Run one statement on the PostgreSQL server's ``postgres`` database (create or drop a database)."""
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def stop(processes: Sequence[subprocess.Popen[bytes]], database: str, prefix: str) -> None:
    """Stop the servers (Ctrl-C, then kill after 10 s), drop their database and their Redis keys."""
    for process in processes:
        process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"*{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()
