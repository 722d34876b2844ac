"""Profile one authenticated GET by id in process: CPU per request, and where it goes.

Builds the platform app (``create_app_from_env``) on a fresh SQLite database (or PostgreSQL with
``--postgresql``), creates an organization and an API key through the API, then sends the same
``GET /api/api-keys/{id}`` (JWT + ``X-Organization-Id``) as raw ASGI calls, one after another: no HTTP
server, no client, so the figure is the app's own CPU time per request.

    .venv/bin/python bench/request_profile.py [--requests 4000] [--postgresql]

Where the time goes, with py-spy (``pip install py-spy``; not a project dependency):

    py-spy record -r 300 -f raw -o /tmp/request.raw -- .venv/bin/python bench/request_profile.py
    .venv/bin/python bench/request_profile.py --shares /tmp/request.raw

``--shares`` reads py-spy's raw output and prints each part of the request's share of the samples
taken while a request ran, attributing a sample to the innermost part it is in.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests import pg

# The parts of a request, matched against py-spy's frames from the innermost outwards.
PARTS = [
    ("metrics (prometheus-client)", "prometheus_client"),
    ("logging (structlog)", "structlog"),
    ("request id (kit/ids)", "kit/ids.py"),
    ("rate limiter (kit/ratelimit)", "kit/ratelimit.py"),
    ("identity (auth/)", "parley/auth/"),
    ("SQLAlchemy (session, ORM, pool)", "sqlalchemy/"),
    ("SQLite adapter and sqlite3 (kit/sqlite)", "kit/sqlite.py"),
    ("asyncpg", "asyncpg/"),
    ("route matching", "matches ("),
    ("response validation and serialization", "serialize_response"),
    ("FastAPI dependency solving", "solve_dependencies"),
    ("the direct handler (kit/direct)", "kit/direct.py"),
    ("the unit of work (kit/db)", "kit/db.py"),
    ("endpoint and service (api_keys/)", "api_keys/"),
]
MIDDLEWARE = "kit/middleware.py"
REQUEST_FRAME = "request_profile.py:"  # with send_request: samples taken while a request ran


def request_samples(raw_path: str, script: str) -> Iterator[tuple[list[str], int]]:
    """The stacks (outermost frame first) and sample counts of a py-spy raw profile of ``script``
    taken while ``send_request`` ran."""
    with open(raw_path) as raw:
        for line in raw:
            stack, _, number = line.rstrip("\n").rpartition(" ")
            if "send_request (" in stack and script in stack:
                yield stack.split(";"), int(number)


def shares(raw_path: str) -> None:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, samples in request_samples(raw_path, REQUEST_FRAME):
        total += samples
        if MIDDLEWARE in frames[-1]:
            counts["Parley's own middleware code"] += samples
            continue
        part = next(
            (name for frame in reversed(frames) for name, marker in PARTS if marker in frame),
            "FastAPI and Starlette request handling (middleware stack, handler, response)",
        )
        counts[part] += samples
    if not total:
        sys.exit(f"no request samples in {raw_path}")
    print(f"{total} samples while a request ran\n\n| part of the request | share |\n|---|---|")
    for name, samples in counts.most_common():
        print(f"| {name} | {samples / total * 100:.1f} % |")


async def send_request(
    app: Any, path: str, headers: list[tuple[bytes, bytes]], method: str = "GET", body: Any = None
) -> tuple[int, bytes]:
    """One request as a raw ASGI call (``path`` may carry a query string; ``body``: sent as JSON); its
    status and response body."""
    path, _, query = path.partition("?")
    payload = b"" if body is None else json.dumps(body).encode()
    if body is not None:
        headers = [
            *headers,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    status = 0
    chunks: list[bytes] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:  # the app listens for a disconnect: there is none
            await asyncio.sleep(3600)
        received = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def measure(app: Any, token: str, requests: int, count_calls: bool = False) -> None:
    import httpx

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://profile") as client:
            auth = {"Authorization": f"Bearer {token}"}
            organization = (
                await client.post("/api/organizations", json={"name": "Profile"}, headers=auth)
            ).json()
            auth["X-Organization-Id"] = organization["id"]
            key = (await client.post("/api/api-keys", json={"name": "profile"}, headers=auth)).json()
        path = f"/api/api-keys/{key['id']}"
        headers = [(name.lower().encode(), value.encode()) for name, value in auth.items()]
        headers.append((b"host", b"profile"))
        if (status := (await send_request(app, path, headers))[0]) != 200:
            sys.exit(f"GET {path} answered {status}")
        for _ in range(500):  # warm-up: caches, pool, statement cache
            await send_request(app, path, headers)
        # Ten slices: on a shared machine other processes disturb some of them (caches, the core's
        # turbo); the fastest slice is the least disturbed figure, the whole run the average.
        # Wall time per request as well: with PostgreSQL it includes the round trips (the server's
        # work and the waits for it), which this process's CPU time does not.
        slices: list[float] = []
        walls: list[float] = []
        size = max(requests // 10, 1)
        for _ in range(10):
            started, wall = time.process_time(), time.perf_counter()
            for _ in range(size):
                await send_request(app, path, headers)
            slices.append((time.process_time() - started) / size)
            walls.append((time.perf_counter() - wall) / size)
        if count_calls:  # Python function calls per request: a figure the machine's load does not move
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(size):
                await send_request(app, path, headers)
            profile.disable()
            stats = pstats.Stats(profile)
            print(f"{stats.total_calls / size:,.0f} function calls per request")  # type: ignore[attr-defined]
            if dump := os.environ.get("PARLEY_PROFILE_DUMP"):
                stats.dump_stats(dump)
        print(
            f"{size * 10} requests: {sum(slices) / len(slices) * 1e6:.0f} µs CPU per request "
            f"(in process, sequential; fastest tenth {min(slices) * 1e6:.0f} µs); "
            f"wall {sum(walls) / len(walls) * 1e6:.0f} µs (fastest tenth {min(walls) * 1e6:.0f} µs)"
        )


@contextlib.contextmanager
def profiled_platform(data_dir: str, *, postgresql: bool, **settings: str) -> Iterator[str]:
    """The platform's settings for a profile in this process's environment (rate limits and decoder
    processes off, ``settings`` on top), a migrated database (a fresh PostgreSQL one with
    ``postgresql``, dropped afterwards) and a day-long token: the token is yielded."""
    os.environ.update(
        {
            "PARLEY_DATA_DIR": data_dir,
            "PARLEY_LOG_LEVEL": "WARNING",
            "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
            "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
            "PARLEY_VOICE_DECODER_PROCESSES": "0",
            "PARLEY_VOICE_DECODER_POOL": "0",
            **settings,
        }
    )
    name = None
    if postgresql:
        name, os.environ["PARLEY_DATABASE_URL"] = pg.create_database("parley_profile")
    try:
        subprocess.run([sys.executable, "-m", "parley", "db", "upgrade"], check=True, capture_output=True)
        create = ["token", "create", "--sub", "profile-user", "--ttl", "86400"]
        yield subprocess.run(
            [sys.executable, "-m", "parley", *create], check=True, capture_output=True, text=True
        ).stdout.strip()
    finally:
        if name:
            pg.drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--postgresql", action="store_true", help="a fresh database on 127.0.0.1:5432")
    parser.add_argument("--shares", metavar="RAW", help="print the shares of a py-spy raw profile instead")
    parser.add_argument(
        "--count-calls", action="store_true", help="also count Python function calls per request"
    )
    args = parser.parse_args()
    if args.shares:
        shares(args.shares)
        return
    with (
        tempfile.TemporaryDirectory(prefix="parley-profile-") as data_dir,
        profiled_platform(data_dir, postgresql=args.postgresql) as token,
    ):
        from parley.app import create_app_from_env

        asyncio.run(measure(create_app_from_env(), token, args.requests, args.count_calls))


if __name__ == "__main__":
    main()
