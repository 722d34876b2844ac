"""CPU time of the connector's fast path per request, in process, without HTTP: side by side.

    .venv/bin/python bench/connector_inprocess.py [--before-src OTHER/src] [--requests 100000]
        [--rounds 3] [--cache-mb 64 0 10]

Complements ``bench/connector_bench.py`` on a busy machine: it counts the CPU time of the process
(``time.process_time``), not wall-clock requests/s, so other work on the machine disturbs it much
less. Each variant runs in a fresh interpreter on one database (20,000 demo orders, a key, rate
limit off), calling ``ConnectorApp.__call__`` with the scope of ``GET /api/orders/<random id>`` and a
``send`` that drops the messages: what is measured is the connector's own work (key check, limits,
lookup, envelope), not uvicorn's. Each run warms up with as many requests as it measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDERS = 20000

CHILD = r"""
import asyncio, random, sys, time
from parley.connector.app import create_connector_app
from parley.connector.config import ConnectorSettings

n, key, orders = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
app = create_connector_app(ConnectorSettings())
rng = random.Random(1)
scopes = [
    {"type": "http", "method": "GET", "query_string": b"", "path": f"/api/orders/{rng.randint(1, orders)}",
     "headers": [(b"host", b"connector"), (b"x-api-key", key)], "client": ("127.0.0.1", 50000)}
    for _ in range(n)
]
statuses = []

async def send(message):
    if message["type"] == "http.response.start":
        statuses.append(message["status"])

async def run():
    await app.store.open()
    for scope in scopes:  # warm-up
        await app(scope, None, send)
    started = time.process_time()
    for scope in scopes:
        await app(scope, None, send)
    elapsed = time.process_time() - started
    assert set(statuses) == {200}, set(statuses)
    print(elapsed / n * 1e6)

asyncio.run(run())
"""


def bench_env(tmp: str) -> dict[str, str]:
    """The environment of a benchmark connector on a SQLite file in ``tmp``, rate limit off."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "PARLEY_DATA_DIR": tmp,
        "PARLEY_CONNECTOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/connector.db",
        "PARLEY_CONNECTOR_RATE_LIMIT": "0",
        "PARLEY_CONNECTOR_LOG_LEVEL": "WARNING",
    }


def prepare(env: dict[str, str]) -> str:
    code = (
        "from parley.connector.config import ConnectorSettings\n"
        "from parley.connector import setup\n"
        "import asyncio, datetime\n"
        "s = ConnectorSettings()\n"
        "setup.upgrade_database(s)\n"
        f"asyncio.run(setup.write_demo_orders(s, {ORDERS}, seed=7, reference=datetime.date(2025, 6, 1)))\n"
        "print(setup.create_key(s, 'bench'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-src", help="also run the connector of this src directory")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cache-mb", type=float, nargs="+", default=[64.0, 0.0], help="ORDER_CACHE_MB values to run"
    )
    args = parser.parse_args()
    print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="connector-inprocess-") as tmp:
        env = bench_env(tmp)
        key = prepare(env)
        variants = {
            f"cache {mb:g} MiB": {**env, "PARLEY_CONNECTOR_ORDER_CACHE_MB": str(mb)} for mb in args.cache_mb
        }
        if args.before_src:
            variants["before"] = {**env, "PYTHONPATH": str(Path(args.before_src).resolve())}
        results: dict[str, list[float]] = {name: [] for name in variants}
        for round_no in range(args.rounds):
            for name, variant_env in variants.items():
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(args.requests), key, str(ORDERS)],
                    env=variant_env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                results[name].append(float(out.stdout.strip()))
                print(
                    f"round {round_no + 1} {name:>16}: {results[name][-1]:6.2f} µs CPU per request",
                    flush=True,
                )
    print(f"\nload average after the run: {os.getloadavg()[0]:.2f}")
    print(f"{args.rounds} rounds x {args.requests} requests (after as many warm-up), random ids 1..{ORDERS}")
    print("| variant | µs CPU per request, median (range) |")
    print("|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f}) |")


if __name__ == "__main__":
    main()
