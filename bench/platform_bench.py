"""Benchmark: an authenticated GET of one resource by id on the platform API, beside a bare ASGI app.

Each request checks a JWT, resolves the user and the organization membership, and reads one API key
by id from the database. The server runs as one uvicorn worker pinned to one core; wrk (64 keep-alive
connections) runs on the other core. Candidates alternate over several rounds in one run, and the
report gives medians and the ratio to the bare ASGI app returning the same JSON bytes.

    .venv/bin/python bench/platform_bench.py [--duration 10] [--rounds 3] [--engines sqlite,postgresql]
        [--before /path/to/older/src] [--database-core] [--auth jwt|api-key]

``--database-core`` moves the local PostgreSQL server to wrk's core during the PostgreSQL rounds (a
database on a host of its own); without it the database's backends share the server's core.

``--auth api-key`` sends the organization's API key instead of a user's JWT (the key's row, its
cached snapshot and the note of its last use, instead of the user and membership).

``--before`` adds the same request served by another source tree (e.g. ``git archive`` of an earlier
commit, its ``src`` directory) as a further candidate in the same rounds, for a before/after figure.

Needs wrk (Debian: apt-get install wrk) and, for PostgreSQL, the server on 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.pinning import postgres_on  # noqa: E402

PY = sys.executable
CONNECTIONS = 64


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): a figure load on other cores hardly moves."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(args: list[str], env: dict[str, str], probe: str) -> Iterator[subprocess.Popen[bytes]]:
    """The server pinned to core 0; yields its process (taskset execs it: the pid is the server's)."""
    process = subprocess.Popen(
        ["taskset", "-c", "0", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait(probe)
        yield process
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def wrk(url: str, headers: dict[str, str], duration: int) -> dict[str, float]:
    command = [
        "taskset",
        "-c",
        "1",
        "wrk",
        "-t",
        "2",
        "-c",
        str(CONNECTIONS),
        "-d",
        f"{duration}s",
        "--latency",
    ]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors:.*", output)
    timeouts = re.search(r"Socket errors:.*timeout (\d+)", output)

    def pct(label: str) -> float:
        match = re.search(rf"\s{label}%\s+([\d.]+)(us|ms|s)", output)
        if not match:
            return float("nan")
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {
        "rps": rps,
        "requests": float(requests),
        "p50_ms": pct("50"),
        "p99_ms": pct("99"),
        "errors": float(non_2xx.group(1)) if non_2xx else 0.0,
        "socket_errors": 1.0 if errors else 0.0,
        # wrk gives up on a request after 2 s: counted here, and missing from the latency percentiles
        "timeouts": float(timeouts.group(1)) if timeouts else 0.0,
    }


_GC_LINE = re.compile(
    r'^python_gc_(collections|objects_collected)_total\{generation="(\d)"\} ([\d.e+]+)$', re.M
)


def gc_counters(metrics_url: str) -> dict[str, float]:
    """The server's garbage-collector counters from its Prometheus metrics: collections and objects
    freed by the collector (not by reference counting), per generation. Counts, not times: what load on
    the machine does not move."""
    text = httpx.get(metrics_url, timeout=10).text
    return {f"{kind}_{generation}": float(value) for kind, generation, value in _GC_LINE.findall(text)}


def measured(
    pid: int, url: str, headers: dict[str, str], duration: int, metrics_url: str | None = None
) -> dict[str, float]:
    """wrk's figures plus the server's CPU milliseconds per request over the run, and with
    ``metrics_url`` its full collections per 10,000 requests and objects the collector freed per request."""
    # The counters are read outside the CPU window: the /metrics request is not one of wrk's.
    gc_before = gc_counters(metrics_url) if metrics_url else {}
    before = cpu_seconds(pid)
    result = wrk(url, headers, duration)
    result["cpu_ms"] = (cpu_seconds(pid) - before) * 1000 / max(result["requests"], 1.0)
    if metrics_url:
        gc_after = gc_counters(metrics_url)
        requests = max(result["requests"], 1.0)
        delta = {name: gc_after.get(name, 0.0) - value for name, value in gc_before.items()}
        result["full_gc_per_10k"] = delta.get("collections_2", 0.0) * 10_000 / requests
        result["gc_freed_per_request"] = (
            sum(v for k, v in delta.items() if k.startswith("objects")) / requests
        )
    return result


def prepare(engine: str, data_dir: Path, pythonpath: str | None = None) -> tuple[dict[str, str], str | None]:
    """A migrated database (SQLite in ``data_dir``, or a new PostgreSQL database) and the server's
    environment; ``pythonpath`` picks the source tree that migrates and serves it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    env.update(
        {
            "PARLEY_DATA_DIR": str(data_dir),
            "PARLEY_LOG_LEVEL": "WARNING",
            # Rate limits off (the organization's too: 3,000 a minute would answer 429s).
            "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
            "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
            # No offline recognizer: its decoder processes would warm up on the server's pinned core
            # during the measurement (a text API is measured here, see "Decoder processes" for voice).
            "PARLEY_VOICE_DECODER_PROCESSES": "0",
            "PARLEY_VOICE_DECODER_POOL": "0",
        }
    )
    dropped = None
    if engine == "postgresql":
        import asyncpg

        name = f"parley_bench_{uuid.uuid4().hex[:8]}"

        async def create() -> None:
            conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
            await conn.execute(f'CREATE DATABASE "{name}"')
            await conn.close()

        asyncio.run(create())
        env["PARLEY_DATABASE_URL"] = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
        dropped = name
    subprocess.run([PY, "-m", "parley", "db", "upgrade"], env=env, check=True, capture_output=True)
    return env, dropped


def drop(name: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--before", help="another source tree's src directory, run as a candidate too")
    parser.add_argument(
        "--database-core",
        action="store_true",
        help="move the local PostgreSQL server's processes to wrk's core during the PostgreSQL rounds, as a "
        "database on a host of its own would be (otherwise its backends also run on the server's core)",
    )
    parser.add_argument(
        "--auth",
        choices=("jwt", "api-key"),
        default="jwt",
        help="the credential each request carries: a user's JWT with X-Organization-Id (default), or an "
        "API key of the organization",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")

    auth_label = ", API key" if args.auth == "api-key" else ""
    results: dict[str, list[dict[str, float]]] = {}
    for engine in args.engines.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            env, database = prepare(engine, data_dir)
            pinned = contextlib.ExitStack()
            try:
                port = _free_port()
                base = f"http://127.0.0.1:{port}"
                token = subprocess.run(
                    [PY, "-m", "parley", "token", "create", "--sub", "bench-user", "--ttl", "86400"],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                serve = [PY, "-m", "parley", "serve", "--port", str(port)]
                with server(serve, env, f"{base}/healthz"):
                    headers = {"Authorization": f"Bearer {token}"}
                    org = httpx.post(
                        f"{base}/api/organizations", json={"name": "Bench"}, headers=headers
                    ).json()
                    headers["X-Organization-Id"] = org["id"]
                    # managing API keys takes the admin role, which a key has with the admin scope
                    wanted = {"name": "bench", "scopes": ["read", "write", "admin"]}
                    key = httpx.post(f"{base}/api/api-keys", json=wanted, headers=headers).json()
                    url = f"{base}/api/api-keys/{key['id']}"
                    if args.auth == "api-key":
                        headers = {"Authorization": f"Bearer {key['secret']}"}
                    answer = httpx.get(url, headers=headers)
                    answer.raise_for_status()  # the measured request must succeed
                    body = answer.content
                (data_dir / "body.json").write_bytes(body)
                bare_env = {**env, "PARLEY_BENCH_BODY": str(data_dir / "body.json")}
                bare_port = _free_port()
                bare = [
                    PY,
                    "-m",
                    "uvicorn",
                    "bench.bare_asgi:app",
                    "--port",
                    str(bare_port),
                    "--log-level",
                    "warning",
                ]
                if engine == "postgresql" and args.database_core:
                    pinned.enter_context(postgres_on(1))
                for round_index in range(args.rounds):
                    with server(
                        bare, {**bare_env, "PYTHONPATH": str(ROOT)}, f"http://127.0.0.1:{bare_port}/"
                    ) as process:
                        results.setdefault("bare ASGI, same JSON", []).append(
                            measured(process.pid, f"http://127.0.0.1:{bare_port}/", {}, args.duration)
                        )
                    candidates = [("", env)]
                    if args.before:
                        candidates.append((", before", {**env, "PYTHONPATH": args.before}))
                    for label, candidate_env in candidates:
                        with server(serve, candidate_env, f"{base}/healthz") as process:
                            wrk(url, headers, 2)  # warm-up: imports, pool, caches
                            results.setdefault(
                                f"GET /api/api-keys/{{id}} ({engine}{label}{auth_label})", []
                            ).append(measured(process.pid, url, headers, args.duration, f"{base}/metrics"))
                    print(f"{engine}: round {round_index + 1}/{args.rounds} done", file=sys.stderr)
            finally:
                pinned.close()
                if database:
                    drop(database)

    baseline = statistics.median(r["rps"] for r in results["bare ASGI, same JSON"])
    print(
        f"\n| candidate | req/s (median of {args.rounds}) | × bare ASGI | p50 ms | p99 ms | "
        "server CPU ms / request | full GCs / 10k requests | objects the GC freed / request | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        rps = statistics.median(r["rps"] for r in runs)
        gc_columns = (
            f"{statistics.median(r['full_gc_per_10k'] for r in runs):.2f} "
            f"| {statistics.median(r['gc_freed_per_request'] for r in runs):.2f}"
            if all("full_gc_per_10k" in r for r in runs)
            else "– | –"
        )
        print(
            f"| {name} | {rps:,.0f} | {rps / baseline:.3f} | {statistics.median(r['p50_ms'] for r in runs):.1f} "
            f"| {statistics.median(r['p99_ms'] for r in runs):.1f} "
            f"| {statistics.median(r['cpu_ms'] for r in runs):.3f} | {gc_columns} "
            f"| {int(sum(r['errors'] for r in runs))} |"
        )


if __name__ == "__main__":
    main()
