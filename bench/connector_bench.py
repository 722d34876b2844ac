"""Benchmark of the order connector's GET against a bare ASGI app, side by side in one run.

    .venv/bin/python bench/connector_bench.py [--orders 20000] [--duration 10] [--rounds 3] [--warmup 2] [--postgres]
        [--before-src OTHER_CHECKOUT/src]

Each server runs as one uvicorn worker (httptools, uvloop, no access log) pinned to one core with
taskset; wrk runs on the other core with 64 keep-alive connections and random ids. Rounds alternate
baseline and candidate so that noise on a shared machine hits both; medians are reported. With
``--before-src`` the connector of another checkout (e.g. the main branch) runs as a third server in
every round, on the same database, so a change is measured before/after side by side. Needs
Debian's wrk (``apt-get install -y wrk``; ``--install-wrk`` does it).

The servers inherit the environment: on SQLite the connector caches payloads (64 MiB per worker by
default, enough for all 20,000 ids). Every server starts empty in every round: at 30,000 req/s the
2 s warm-up touches nearly every id, but on a busy machine serving a few thousand req/s a longer
``--warmup`` is needed before lookups are mostly hits. For the cold figure run with
``PARLEY_CONNECTOR_ORDER_CACHE_MB=0`` (no cache) or a cache smaller than the id range (``=10``:
about a quarter of the ids); a checkout without the setting ignores it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
LUA = Path(__file__).with_name("connector_wrk.lua")


@dataclass
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def ensure_wrk(install: bool) -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if install:
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True)
        found = shutil.which("wrk")
        if found:
            return found
    sys.exit(
        "wrk is not installed. Install Debian's package with `apt-get install -y wrk` "
        "(or rerun with --install-wrk)."
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cores() -> tuple[str, str]:
    n = os.cpu_count() or 1
    return ("1", "0") if n >= 2 else ("0", "0")


def start_server(target: str, port: int, env: dict[str, str], factory: bool) -> subprocess.Popen[bytes]:
    server_core, _ = cores()
    cmd = [
        "taskset",
        "-c",
        server_core,
        PYTHON,
        "-m",
        "uvicorn",
        target,
        "--port",
        str(port),
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    if factory:
        cmd.append("--factory")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"server {target} did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(wrk: str, port: int, key: str, duration: int, orders: int) -> Result:
    _, client_core = cores()
    env = {**os.environ, "ORDERS": str(orders)}
    cmd = [
        "taskset",
        "-c",
        client_core,
        wrk,
        "-t1",
        "-c64",
        f"-d{duration}s",
        "--latency",
        "-s",
        str(LUA),
        "-H",
        f"X-API-Key: {key}",
        f"http://127.0.0.1:{port}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))

    def parse(text: str) -> float:
        m = re.match(r"([\d.]+)(us|ms|s)", text)
        return _ms(m.group(1), m.group(2)) if m else float("nan")

    errors = 0
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors += int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        errors += sum(int(g) for g in m.groups())
    return Result(rps, parse(lat.get("50", "")), parse(lat.get("99", "")), errors)


def prepare(env: dict[str, str], orders: int) -> str:
    """Migrate, seed demo orders and create a key in the database named by env; return the key."""
    code = (
        "from parley.connector.config import ConnectorSettings\n"
        "from parley.connector import setup\n"
        "import asyncio, datetime\n"
        "s = ConnectorSettings()\n"
        "setup.upgrade_database(s)\n"
        f"asyncio.run(setup.write_demo_orders(s, {orders}, seed=7, reference=datetime.date(2025, 6, 1)))\n"
        "print(setup.create_key(s, 'bench-' + __import__('secrets').token_hex(4)))\n"
    )
    return subprocess.run(
        [PYTHON, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def sample_body(port: int, key: str) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/orders/1", headers={"X-API-Key": key})
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
        return bytes(response.read())


def bench(
    label: str, env: dict[str, str], args: argparse.Namespace, wrk: str, body_file: Path
) -> dict[str, list[Result]]:
    key = prepare(env, args.orders)
    port = free_port()
    proc = start_server("parley.connector.app:create_app_from_env", port, env, factory=True)
    try:
        body_file.write_bytes(sample_body(port, key))
    finally:
        stop(proc)
    servers: dict[str, tuple[str, dict[str, str], bool]] = {
        "bare": ("bench.connector_bare:app", {**env, "CONNECTOR_BENCH_BODY": str(body_file)}, False),
        label: ("parley.connector.app:create_app_from_env", env, True),
    }
    if args.before_src:
        before_env = {**env, "PYTHONPATH": f"{ROOT}:{Path(args.before_src).resolve()}"}
        servers[f"{label} before"] = ("parley.connector.app:create_app_from_env", before_env, True)
    results: dict[str, list[Result]] = {name: [] for name in servers}
    for round_no in range(args.rounds):
        for name, (target, server_env, factory) in servers.items():
            port = free_port()
            proc = start_server(target, port, server_env, factory)
            try:
                run_wrk(wrk, port, key, args.warmup, args.orders)  # warm-up
                result = run_wrk(wrk, port, key, args.duration, args.orders)
            finally:
                stop(proc)
            results[name].append(result)
            print(
                f"round {round_no + 1} {name:>16}: {result.rps:9.0f} req/s  p50 {result.p50_ms:6.2f} ms  "
                f"p99 {result.p99_ms:6.2f} ms  errors {result.errors}",
                flush=True,
            )
    return results


def summarize(results: dict[str, list[Result]]) -> list[str]:
    return [_row(label, results) for label in results if label != "bare"]


def _row(label: str, results: dict[str, list[Result]]) -> str:
    bare = statistics.median(r.rps for r in results["bare"])
    runs = results[label]
    ratios = [c.rps / b.rps for b, c in zip(results["bare"], runs, strict=True)]
    return (
        f"| {label} | {statistics.median(r.rps for r in runs):,.0f} | {bare:,.0f} "
        f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
        f"| {statistics.median(r.p50_ms for r in runs):.2f} | {statistics.median(r.p99_ms for r in runs):.2f} "
        f"({max(r.p99_ms for r in runs):.2f}) | {sum(r.errors for r in runs)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="seconds of load before each measurement (a fresh server's payload cache fills meanwhile)",
    )
    parser.add_argument(
        "--postgres", action="store_true", help="also measure PostgreSQL (tests/pg.py server)"
    )
    parser.add_argument(
        "--before-src", help="also run the connector of this src directory (before/after in one run)"
    )
    parser.add_argument(
        "--sqlite", action=argparse.BooleanOptionalAction, default=True, help="measure SQLite"
    )
    parser.add_argument("--install-wrk", action="store_true", help="apt-get install wrk when it is missing")
    args = parser.parse_args()
    wrk = ensure_wrk(args.install_wrk)
    load = os.getloadavg()[0]
    print(f"load average before the run: {load:.2f} on {os.cpu_count()} cores", flush=True)
    if load > 0.5:
        print("warning: the machine is busy; figures will be noisy (ratios are more robust than req/s)")

    rows = []
    with tempfile.TemporaryDirectory(prefix="connector-bench-") as tmp:
        base_env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}",
            "PARLEY_DATA_DIR": tmp,
            "PARLEY_CONNECTOR_RATE_LIMIT": "0",
            "PARLEY_CONNECTOR_LOG_LEVEL": "WARNING",
        }
        body_file = Path(tmp) / "body.json"
        sqlite_env = {**base_env, "PARLEY_CONNECTOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/connector.db"}
        if args.sqlite:
            rows += summarize(bench("SQLite", sqlite_env, args, wrk, body_file))
        if args.postgres:
            sys.path.insert(0, str(ROOT))
            from tests import pg

            name, url = pg.create_database("connector_bench")
            try:
                pg_env = {**base_env, "PARLEY_CONNECTOR_DATABASE_URL": url}
                rows += summarize(bench("PostgreSQL", pg_env, args, wrk, body_file))
            finally:
                pg.drop_database(name)

    print()
    print(
        f"{args.rounds} rounds x {args.duration} s after {args.warmup} s of warm-up, 64 connections, "
        f"{args.orders} orders, random ids"
    )
    print("| store | connector req/s | bare ASGI req/s | ratio (range) | p50 ms | p99 ms (worst) | errors |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
