"""Profile the call list in process: CPU per request for each of calls_list_bench's requests.

Builds the platform app on a fresh SQLite database (or PostgreSQL with ``--postgresql``), creates an
organization through the API, seeds it with calls_list_bench's 10,000 calls (and 1,000 of another
organization), then sends each list request of that bench (first page, cursor page, outcome filter,
the empty page) as raw ASGI calls, one after another: no HTTP server, no client, so the figure is the
app's own CPU time per request.

    PYTHONPATH=src .venv/bin/python bench/calls_list_profile.py [--requests 2000] [--postgresql]
        [--only "empty page"] [--cprofile tottime|cumtime] [--count-calls]

``--cprofile`` runs the requests of ``--only`` (default: all) under cProfile and prints the top of it
(py-spy does not see SQLAlchemy's greenlet work as part of the request); ``--count-calls`` prints the
Python function calls per request (cProfile's total, a load-independent figure).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.calls_list_bench import OTHER_CALLS, insert_seed, paths_of, seed_rows
from bench.request_profile import profiled_platform, send_request

LISTED = 10_000


async def measure(app: Any, token: str, args: argparse.Namespace) -> None:
    import httpx

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://profile") as client:
            auth = {"Authorization": f"Bearer {token}"}
            orgs = [
                (await client.post("/api/organizations", json={"name": f"Profile {i}"}, headers=auth)).json()
                for i in range(2)
            ]
        listed = seed_rows(orgs[0]["id"], LISTED, 0)
        url = os.environ.get("PARLEY_DATABASE_URL") or f"sqlite+aiosqlite:///{args.data_dir}/parley.db"
        await insert_seed(url, [listed, seed_rows(orgs[1]["id"], OTHER_CALLS, 1)])
        auth["X-Organization-Id"] = orgs[0]["id"]
        headers = [(name.lower().encode(), value.encode()) for name, value in auth.items()]
        headers.append((b"host", b"profile"))
        for name, path in paths_of(listed).items():
            if args.only and args.only not in name:
                continue
            if (status := (await send_request(app, path, headers))[0]) != 200:
                sys.exit(f"GET {path} answered {status}")
            for _ in range(200):  # warm-up: caches, pool, statement cache
                await send_request(app, path, headers)
            if args.cprofile or args.count_calls:
                profiler = cProfile.Profile()
                profiler.enable()
                for _ in range(args.requests):
                    await send_request(app, path, headers)
                profiler.disable()
                stats = pstats.Stats(profiler)
                print(f"{name}: {stats.total_calls / args.requests:.0f} function calls per request")  # type: ignore[attr-defined]
                if args.cprofile:
                    stats.sort_stats(args.cprofile).print_stats(int(os.environ.get("TOP", "40")))
                continue
            # Ten slices: the fastest is the least disturbed by other processes, the whole run the average.
            slices: list[float] = []
            size = max(args.requests // 10, 1)
            for _ in range(10):
                started = time.process_time()
                for _ in range(size):
                    await send_request(app, path, headers)
                slices.append((time.process_time() - started) / size)
            print(
                f"{name}: {sum(slices) / len(slices) * 1e6:.0f} µs CPU per request "
                f"(fastest tenth {min(slices) * 1e6:.0f} µs)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--postgresql", action="store_true", help="a fresh database on 127.0.0.1:5432")
    parser.add_argument("--only", help="only the requests whose name contains this")
    parser.add_argument("--cprofile", choices=["tottime", "cumtime"])
    parser.add_argument("--count-calls", action="store_true")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="parley-profile-") as data_dir,
        profiled_platform(data_dir, postgresql=args.postgresql) as token,
    ):
        args.data_dir = data_dir
        from parley.app import create_app_from_env

        asyncio.run(measure(create_app_from_env(), token, args))


if __name__ == "__main__":
    main()
