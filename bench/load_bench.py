"""Sustained load and faults: the platform API (PostgreSQL + Redis) and the order connector under wrk.

Two parts, each reporting error counts, throughput and the servers' resident memory over time:

``sustained``: wrk drives the platform (an authenticated ``GET /api/organizations/{id}``, JWT check +
membership + row read on PostgreSQL) and the connector (``GET /api/orders/{random id}``) at the same
time for ``--duration`` seconds. RSS of both server processes is sampled every ``--sample`` seconds;
"flat memory" means the last tenth of the run is within a few percent of the first tenth after warm-up.

``faults`` (``--faults``): a Python load generator reads and writes the platform while the database
disappears and comes back, then while Redis stops. Every answer is counted by status: 503 with
Retry-After during the outage, no 500s, 200 again within seconds without restarting the server.
By default the outage is a TCP proxy between the platform and PostgreSQL that is cut (every connection
reset, new ones refused) and restored, and a private ``redis-server`` that is stopped. With
``--restart-postgres`` the machine's PostgreSQL cluster itself is restarted
(``pg_ctlcluster --skip-systemctl-redirect <version> main restart``; the bench starts it again even
when it fails) — only on a machine you own: every other client of that server sees the outage.

    .venv/bin/python bench/load_bench.py --duration 600             # ten minutes sustained
    .venv/bin/python bench/load_bench.py --duration 0 --faults      # the fault run only

Needs wrk, PostgreSQL on 127.0.0.1:5432 (tests/pg.py) and redis-server. Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests import pg  # noqa: E402
from tests.conftest import JWT_SECRET, make_token  # noqa: E402
from tests.live import free_port  # noqa: E402
from tests.ops.proxy import TcpProxy  # noqa: E402

PY = sys.executable
LUA = ROOT / "bench" / "connector_wrk.lua"


# --- processes ------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else float("nan")


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def process(cmd: list[str], env: dict[str, str], probe: str) -> Iterator[subprocess.Popen[bytes]]:
    log = Path(env["PARLEY_DATA_DIR"]) / f"{Path(cmd[3] if cmd[2] == 'parley' else 'connector').name}.log"
    with log.open("ab") as log_file:  # the servers' JSON logs stay beside their data
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log_file)
    try:
        wait_http(probe)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server(port: int, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


@dataclass
class Stack:
    platform: subprocess.Popen[bytes]
    connector: subprocess.Popen[bytes]
    platform_url: str
    connector_url: str
    token: str
    org: str
    connector_key: str
    orders: int
    proxy: TcpProxy | None = None
    redis: subprocess.Popen[bytes] | None = None
    redis_port: int = 0


def platform_env(tmp: Path, database_url: str, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}",
        "PARLEY_DATA_DIR": str(tmp),
        "PARLEY_DATABASE_URL": database_url,
        "PARLEY_REDIS_URL": redis_url,
        "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
        "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
        # One organization takes all the load here: its per-organization budget would answer 429s.
        "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
        "PARLEY_LOG_LEVEL": "WARNING",
        "PARLEY_LOG_JSON": "true",
        "PARLEY_DB_POOL_SIZE": "20",
        "PARLEY_DB_CONNECT_TIMEOUT": "2",
        "PARLEY_DB_STATEMENT_TIMEOUT": "5",
        "PARLEY_DB_POOL_TIMEOUT": "5",
        "PARLEY_CONNECTOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/connector.db",
        "PARLEY_CONNECTOR_RATE_LIMIT": "0",
        "PARLEY_CONNECTOR_LOG_LEVEL": "WARNING",
    }


def prepare_connector(env: dict[str, str], orders: int) -> str:
    code = (
        "from parley.connector.config import ConnectorSettings\n"
        "from parley.connector import setup\n"
        "import asyncio, datetime\n"
        "s = ConnectorSettings()\n"
        "setup.upgrade_database(s)\n"
        f"asyncio.run(setup.write_demo_orders(s, {orders}, seed=7, reference=datetime.date(2025, 6, 1)))\n"
        "print(setup.create_key(s, 'load-bench'))\n"
    )
    return subprocess.run(
        [PY, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@contextlib.contextmanager
def stack(tmp: Path, orders: int, *, proxied: bool, private_redis: bool) -> Iterator[Stack]:
    """Platform + connector on a fresh PostgreSQL database. Redis: the machine's (6379), or for the
    fault run a private redis-server that may be stopped."""
    tmp.mkdir(parents=True, exist_ok=True)
    name, url = pg.create_database("parley_load")
    proxy = TcpProxy("127.0.0.1", 5432).start() if proxied else None
    redis_port = free_port() if private_redis else 6379
    try:
        served_url = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}") if proxy else url
        with redis_server(redis_port, tmp) if private_redis else contextlib.nullcontext() as redis:
            env = platform_env(tmp, served_url, f"redis://127.0.0.1:{redis_port}/0")
            subprocess.run([PY, "-m", "parley", "db", "upgrade"], env=env, check=True, capture_output=True)
            key = prepare_connector(env, orders)
            p_port, c_port = free_port(), free_port()
            with (
                process(
                    [PY, "-m", "parley", "serve", "--port", str(p_port)],
                    env,
                    f"http://127.0.0.1:{p_port}/healthz",
                ) as platform,
                process(
                    [
                        PY,
                        "-m",
                        "uvicorn",
                        "parley.connector.app:create_app_from_env",
                        "--factory",
                        "--port",
                        str(c_port),
                        "--log-level",
                        "warning",
                        "--no-access-log",
                    ],
                    env,
                    f"http://127.0.0.1:{c_port}/healthz",
                ) as connector,
            ):
                token = make_token("load-bench", ttl=24 * 3600)
                base = f"http://127.0.0.1:{p_port}"
                org = httpx.post(
                    f"{base}/api/organizations",
                    json={"name": "Load"},
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=30,
                ).json()["id"]
                yield Stack(
                    platform,
                    connector,
                    base,
                    f"http://127.0.0.1:{c_port}",
                    token,
                    org,
                    key,
                    orders,
                    proxy,
                    redis,
                    redis_port,
                )
    finally:
        if proxy is not None:
            proxy.close()
        pg.drop_database(name)


# --- sustained load ---------------------------------------------------------------------------------


@dataclass
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int


def _ms(text: str) -> float:
    match = re.match(r"([\d.]+)(us|ms|s)", text)
    if not match:
        return float("nan")
    return float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]


def parse_wrk(out: str) -> WrkResult:
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    latency = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.M))
    non_2xx = int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", out)) else 0
    sockets = 0
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        sockets = sum(int(g) for g in m.groups())
    return WrkResult(requests, rps, _ms(latency.get("50", "")), _ms(latency.get("99", "")), non_2xx, sockets)


def wrk(
    url: str, headers: dict[str, str], duration: int, connections: int, lua: Path | None = None, **env: str
) -> subprocess.Popen[str]:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "--latency"]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    if lua is not None:
        cmd += ["-s", str(lua)]
    return subprocess.Popen([*cmd, url], stdout=subprocess.PIPE, text=True, env={**os.environ, **env})


@dataclass
class MemorySeries:
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def summary(self, name: str) -> dict[str, float]:
        values = [mb for _, mb in self.samples[name]]
        tenth = max(len(values) // 10, 1)
        # The first tenth is warm-up (imports, pools, caches filling); compare the second to the last.
        early = statistics.median(values[tenth : 2 * tenth] or values[:tenth])
        late = statistics.median(values[-tenth:])
        return {
            "start_mb": round(values[0], 1),
            "early_mb": round(early, 1),
            "late_mb": round(late, 1),
            "max_mb": round(max(values), 1),
            "growth_pct": round((late - early) / early * 100, 1),
        }


def sample_memory(pids: dict[str, int], every: float, stop: threading.Event, series: MemorySeries) -> None:
    started = time.monotonic()
    while not stop.is_set():
        for name, pid in pids.items():
            with contextlib.suppress(OSError):
                series.samples.setdefault(name, []).append((time.monotonic() - started, rss_mb(pid)))
        stop.wait(every)


def sustained(s: Stack, duration: int, connections: int, every: float) -> dict[str, Any]:
    series = MemorySeries()
    stop = threading.Event()
    sampler = threading.Thread(
        target=sample_memory,
        args=({"platform": s.platform.pid, "connector": s.connector.pid}, every, stop, series),
        daemon=True,
    )
    sampler.start()
    platform = wrk(
        f"{s.platform_url}/api/organizations/{s.org}",
        {"Authorization": f"Bearer {s.token}", "X-Organization-Id": s.org},
        duration,
        connections,
    )
    connector = wrk(
        s.connector_url, {"X-API-Key": s.connector_key}, duration, connections, LUA, ORDERS=str(s.orders)
    )
    p_out, _ = platform.communicate()
    c_out, _ = connector.communicate()
    stop.set()
    sampler.join()
    return {
        "duration_s": duration,
        "connections_each": connections,
        "platform": vars(parse_wrk(p_out)) | {"memory": series.summary("platform")},
        "connector": vars(parse_wrk(c_out)) | {"memory": series.summary("connector")},
    }


# --- faults -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    without_retry_after: int = 0
    transport_errors: int = 0
    timeline: list[tuple[float, int]] = field(default_factory=list)


async def _load(s: Stack, tally: Tally, stop: asyncio.Event, workers: int) -> None:
    headers = {"Authorization": f"Bearer {s.token}", "X-Organization-Id": s.org}
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=s.platform_url, timeout=30) as client:

        async def worker(i: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    if n % 4 == 0:
                        r = await client.post("/api/api-keys", json={"name": f"w{i}-{n}"}, headers=headers)
                    else:
                        r = await client.get(f"/api/organizations/{s.org}", headers=headers)
                except httpx.TransportError:
                    tally.transport_errors += 1
                    await asyncio.sleep(0.1)
                    continue
                tally.statuses[r.status_code] += 1
                tally.timeline.append((time.monotonic() - started, r.status_code))
                if r.status_code == 503 and "retry-after" not in r.headers:
                    tally.without_retry_after += 1
                await asyncio.sleep(0.005)

        await asyncio.gather(*(worker(i) for i in range(workers)))


def restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    try:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
            check=True,
            timeout=120,
        )
    finally:
        # Whatever happened, leave the cluster running.
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"], check=False, timeout=120
        )


def recovery_seconds(timeline: list[tuple[float, int]], after: float) -> float | None:
    """Seconds from ``after`` to the first 200 answered after it."""
    for at, status in timeline:
        if at >= after and status == 200:
            return round(at - after, 2)
    return None


async def faults(s: Stack, *, outage: float, restart: bool, workers: int) -> dict[str, Any]:
    tally, stop = Tally(), asyncio.Event()
    load = asyncio.create_task(_load(s, tally, stop, workers))
    started = time.monotonic()
    await asyncio.sleep(10)
    async with httpx.AsyncClient(base_url=s.platform_url, timeout=30) as probe:
        # 1. the database goes away and comes back
        db_lost = time.monotonic() - started
        if restart:
            await asyncio.to_thread(restart_postgres)
        else:
            assert s.proxy is not None
            await asyncio.to_thread(s.proxy.cut)
            await asyncio.sleep(outage / 2)
        ready_db = await probe.get("/readyz")
        if not restart:
            await asyncio.sleep(outage / 2)
            await asyncio.to_thread(s.proxy.restore)  # type: ignore[union-attr]
        db_back = time.monotonic() - started
        await asyncio.sleep(15)
        # 2. Redis stops (and stays down for the rest of the run)
        assert s.redis is not None
        s.redis.terminate()
        s.redis.wait(10)
        await asyncio.sleep(2)
        ready_redis = await probe.get("/readyz")
        await asyncio.sleep(15)
    stop.set()
    await load
    recovered = recovery_seconds(tally.timeline, db_back)
    return {
        "outage": "postgresql restart" if restart else f"TCP proxy cut for {outage:g} s",
        "answers": dict(sorted(tally.statuses.items())),
        "503_without_retry_after": tally.without_retry_after,
        "transport_errors": tally.transport_errors,
        "readyz_during_db_outage": [ready_db.status_code, ready_db.json()],
        "readyz_redis_down": [ready_redis.status_code, ready_redis.json()],
        "db_lost_at_s": round(db_lost, 1),
        "db_back_at_s": round(db_back, 1),
        "first_200_after_db_back_s": recovered,
        "errors_5xx_other_than_503": sum(
            n for code, n in tally.statuses.items() if code >= 500 and code != 503
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=600, help="seconds of sustained load (0 skips it)")
    parser.add_argument("--connections", type=int, default=8, help="wrk connections per service")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--faults", action="store_true", help="run the fault scenario")
    parser.add_argument("--outage", type=float, default=4.0, help="seconds the database stays cut")
    parser.add_argument("--workers", type=int, default=8, help="concurrent clients in the fault run")
    parser.add_argument(
        "--restart-postgres",
        action="store_true",
        help="restart the machine's PostgreSQL instead of a proxy cut",
    )
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    for tool in ("wrk", "redis-server"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed")
    print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp:
        if args.duration > 0:
            with stack(Path(tmp) / "sustained", args.orders, proxied=False, private_redis=False) as s:
                report["sustained"] = sustained(s, args.duration, args.connections, args.sample)
            print(json.dumps(report["sustained"], indent=2), flush=True)
        if args.faults:
            with stack(
                Path(tmp) / "faults", args.orders, proxied=not args.restart_postgres, private_redis=True
            ) as s:
                report["faults"] = asyncio.run(
                    faults(s, outage=args.outage, restart=args.restart_postgres, workers=args.workers)
                )
            print(json.dumps(report["faults"], indent=2), flush=True)
    report["load_average_after"] = round(os.getloadavg()[0], 2)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    failed = []
    for part in ("platform", "connector"):
        result = report.get("sustained", {}).get(part)
        if result and (result["non_2xx"] or result["socket_errors"]):
            failed.append(f"{part}: {result['non_2xx']} non-2xx, {result['socket_errors']} socket errors")
    if "faults" in report and report["faults"]["errors_5xx_other_than_503"]:
        failed.append("faults: 5xx answers other than 503")
    if failed:
        sys.exit("FAILED: " + "; ".join(failed))


if __name__ == "__main__":
    main()
