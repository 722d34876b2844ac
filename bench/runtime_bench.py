"""Benchmark: the conversation runtime.

1. Engine time per deterministic turn: the order-status flow of docs/flows.md (greet, spoken order
   number, connector lookup, status, goodbye) run by the flow engine in this process, with the order
   lookup going to the real order connector (one uvicorn worker) on loopback. The engine's own time
   excludes the wait for the tool (``TurnResult.engine_ms``); the tool wait is reported beside it.
2. Concurrent sessions: N text sessions at once through the platform's HTTP API (one uvicorn worker,
   SQLite), each create → order number → "nein" (cost) → "nein" (callback), against the same connector. Counts errors and wrong
   answers and reports request latencies.

    .venv/bin/python bench/runtime_bench.py [--turns 1000] [--sessions 500] [--postgres]
        [--platform-src /path/to/older/src]

The HTTP part also reports the platform process's CPU time per request (user + system, from /proc),
which a loaded machine disturbs far less than requests per second. ``--platform-src`` serves the
platform from another source tree (e.g. ``git archive <commit> src``) for a before/after figure.

With ``--postgres`` the platform's database is a fresh one on the PostgreSQL at 127.0.0.1:5432
(``PARLEY_TEST_PG_DSN``), dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
# This checkout's platform, unless PYTHONPATH names another tree (bench/turn_profile.py compares two).
if os.environ.get("PYTHONPATH"):
    sys.path.append(str(ROOT / "src"))
else:
    sys.path.insert(0, str(ROOT / "src"))
sys.path.append(str(ROOT))  # bench.pinning (and tests.pg for --postgres)
PYTHON = sys.executable
JWT_SECRET = "bench-secret-" + "x" * 40

from bench.pinning import postgres_on  # noqa: E402
from parley.flows.definition import FlowDefinition  # noqa: E402
from parley.runtime.engine import FlowEngine  # noqa: E402
from parley.runtime.ports import ToolOutcome, ToolSpec  # noqa: E402
from parley.runtime.state import ConversationState  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(
    target: str, port: int, env: dict[str, str], log: Path, profile: str | None = None
) -> subprocess.Popen[bytes]:
    cmd = [PYTHON, "-m", "uvicorn", target, "--factory", "--port", str(port), "--no-access-log"]
    if profile is not None:  # the same options, under cProfile (bench/profiled_platform.py)
        cmd = [PYTHON, str(ROOT / "bench" / "profiled_platform.py"), profile, str(port)]
    else:
        cmd += [
            "--log-level",
            "warning",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--timeout-keep-alive",
            "300",
        ]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(f"{target} did not start")


def order_flow() -> dict[str, Any]:
    text = (ROOT / "docs" / "flows.md").read_text()
    section = text[text.index("## Complete example") :]
    match = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert match is not None
    return dict(json.loads(match.group(1)))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class ConnectorTools:
    """The order_lookup tool as a direct loopback call to the connector."""

    def __init__(self, http: httpx.AsyncClient, url: str, key: str) -> None:
        self.http, self.url, self.key = http, url, key

    async def call(self, ref: str, arguments: dict[str, Any]) -> ToolOutcome:
        started = time.perf_counter()
        response = await self.http.get(
            f"{self.url}/api/orders/{arguments['order_id']}", headers={"X-API-Key": self.key}
        )
        latency = (time.perf_counter() - started) * 1000
        return ToolOutcome(
            "ok", latency, response.status_code, response.json(), tool_id="tool_bench", tool_name=ref
        )

    async def describe(self, refs: list[str]) -> list[ToolSpec]:
        return []


async def engine_bench(connector: str, key: str, conversations: int) -> dict[str, float]:
    definition = FlowDefinition.model_validate(order_flow())
    engine_ms: list[float] = []
    tool_ms: list[float] = []
    async with httpx.AsyncClient() as http:
        engine = FlowEngine(definition, tools=ConnectorTools(http, connector, key))
        for i in range(conversations + 50):
            state = engine.new_state(session_id=f"ses_{i}", channel="test")
            turns = [await engine.start(state)]
            state = ConversationState.from_json(state.to_json())
            turns.append(await engine.handle(state, "eins zwei" if i % 2 else "1 7"))
            state = ConversationState.from_json(state.to_json())
            for _ in range(2):  # "no" to the cost, then "no" to the callback (docs/flows.md)
                state = ConversationState.from_json(state.to_json())
                turns.append(await engine.handle(state, "nein"))
            assert state.outcome == "completed", (state.end_reason, [t.text for t in turns])
            if i >= 50:  # warm-up
                engine_ms += [t.engine_ms for t in turns]
                tool_ms += [t.tool_ms for t in turns if t.tool_ms]
    return {
        "turns": len(engine_ms),
        "engine_p50": pct(engine_ms, 50),
        "engine_p99": pct(engine_ms, 99),
        "engine_max": max(engine_ms),
        "tool_p50": pct(tool_ms, 50),
        "tool_p99": pct(tool_ms, 99),
    }


async def sessions_bench(
    platform: str, connector: str, key: str, sessions: int, profiled: bool = False
) -> dict[str, float]:
    import jwt

    now = int(time.time())
    token = jwt.encode({"sub": "bench", "iat": now, "exp": now + 3600}, JWT_SECRET, algorithm="HS256")
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=platform, headers=headers, timeout=300) as client:
        org = (await client.post("/api/organizations", json={"name": "Bench"})).json()["id"]
        client.headers["X-Organization-Id"] = org
        tool = {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": key}}
        assert (await client.post("/api/tools", json=tool)).status_code == 200
        flow = (await client.post("/api/flows", json={"name": "Orders", "definition": order_flow()})).json()
        assert (await client.post(f"/api/flows/{flow['id']}/publish")).status_code == 200

        latencies: list[float] = []
        errors: list[str] = []

        # Each conversation has a client (one connection) of its own, as separate callers would: one
        # client with 500 connections spent more CPU per request than the platform (httpcore matches
        # queued requests against every pooled connection each time one finishes).
        tls = ssl.create_default_context()  # made once: loading the CA store takes milliseconds
        conversation_headers = dict(client.headers)

        async def timed(
            conversation: httpx.AsyncClient, path: str, body: dict[str, Any]
        ) -> dict[str, Any] | None:
            started = time.perf_counter()
            try:
                response = await conversation.post(path, json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{path}: {type(exc).__name__}")
                return None
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                errors.append(f"{path}: {response.status_code} {response.text[:200]}")
                return None
            return dict(response.json())

        async def conversation(i: int) -> None:
            async with httpx.AsyncClient(
                base_url=platform, headers=conversation_headers, timeout=300, verify=tls
            ) as caller:
                await talk(caller)

        async def talk(caller: httpx.AsyncClient) -> None:
            opening = await timed(caller, "/api/sessions", {"flow_id": flow["id"], "channel": "web"})
            if opening is None:
                return
            status = await timed(caller, f"/api/sessions/{opening['id']}/messages", {"text": "eins zwei"})
            if status is None:
                return
            if "Kosten wissen" not in status["reply"]:  # the status, then the question about the cost
                errors.append(f"wrong answer: {status['reply'][:200]}")
            callback = await timed(caller, f"/api/sessions/{opening['id']}/messages", {"text": "nein"})
            if callback is None:
                return
            goodbye = await timed(caller, f"/api/sessions/{opening['id']}/messages", {"text": "nein"})
            if goodbye is not None and goodbye["outcome"] != "completed":
                errors.append(f"not completed: {goodbye['outcome']}")

        if profiled:
            await client.post("/__profile/on")
        started = time.perf_counter()
        await asyncio.gather(*(conversation(i) for i in range(sessions)))
        wall = time.perf_counter() - started
        statements = int((await client.post("/__profile/off")).text) if profiled else 0
        live = (await client.get("/api/monitoring/sessions/live")).json()["items"]
    for error in errors[:5]:
        print("  error:", error)
    return {
        "sessions": sessions,
        "requests": len(latencies),
        "errors": len(errors),
        "still_live": len(live),
        "wall_s": wall,
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "turns_per_s": len(latencies) / wall,
        "statements": statements,
    }


def prepare_connector(env: dict[str, str]) -> str:
    code = (
        "from parley.connector.config import ConnectorSettings\n"
        "from parley.connector import setup\n"
        "import asyncio, datetime\n"
        "s = ConnectorSettings()\n"
        "setup.upgrade_database(s)\n"
        "asyncio.run(setup.write_demo_orders(s, 1000, seed=7, reference=datetime.date(2025, 6, 1)))\n"
        "print(setup.create_key(s, 'runtime-bench'))\n"
    )
    return subprocess.run(
        [PYTHON, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--turns", type=int, default=1000, help="Conversations for the engine figures (3 turns each)."
    )
    parser.add_argument("--sessions", type=int, default=500, help="Concurrent sessions over HTTP.")
    parser.add_argument("--postgres", action="store_true", help="Run the platform on PostgreSQL.")
    parser.add_argument("--platform-src", help="Serve the platform from this source tree's src directory.")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="Pin the platform worker to the first core and the connector, this load generator and (with "
        "--postgres) the local PostgreSQL server's processes to the second, as the platform GET benchmark "
        "pins its worker (otherwise all share both cores).",
    )
    parser.add_argument(
        "--profile",
        metavar="OUT",
        help="Run the platform under cProfile during the burst, write the profile to OUT and print its "
        "function calls and SQL statements per request (CPU figures are then the profiler's too).",
    )
    args = parser.parse_args()
    pg_name: str | None = None
    if args.postgres:
        from tests import pg

        pg_name, pg_url = pg.create_database("parley_runtime_bench")
    with tempfile.TemporaryDirectory(prefix="parley-runtime-bench-") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
        connector_env = {
            **base,
            "PARLEY_CONNECTOR_DATA_DIR": f"{tmp}/connector",
            "PARLEY_CONNECTOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/connector.db",
            "PARLEY_CONNECTOR_RATE_LIMIT": "0",
            "PARLEY_CONNECTOR_LOG_LEVEL": "WARNING",
        }
        key = prepare_connector(connector_env)
        connector_port, platform_port = free_port(), free_port()
        connector_url = f"http://127.0.0.1:{connector_port}"
        platform_env = {
            **base,
            "PARLEY_DATA_DIR": f"{tmp}/platform",
            "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
            "PARLEY_CONNECTOR_URL": connector_url,
            "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
            "PARLEY_LOG_LEVEL": "WARNING",
            "PARLEY_DB_POOL_SIZE": "64",
            "PARLEY_DB_POOL_TIMEOUT": "300",
        }
        if pg_name is not None:
            platform_env["PARLEY_DATABASE_URL"] = pg_url
        if args.platform_src:
            platform_env["PYTHONPATH"] = args.platform_src
        subprocess.run([PYTHON, "-m", "parley", "db", "upgrade"], env=platform_env, check=True, cwd=ROOT)
        connector = start(
            "parley.connector.app:create_app_from_env",
            connector_port,
            connector_env,
            Path(tmp, "connector.log"),
        )
        try:
            platform = start(
                "parley.app:create_app_from_env",
                platform_port,
                platform_env,
                Path(tmp, "platform.log"),
                profile=args.profile,
            )
        except BaseException:
            connector.terminate()  # not left running when the platform does not start
            connector.wait(timeout=10)
            raise
        pinned = contextlib.ExitStack()
        if args.pin:
            os.sched_setaffinity(platform.pid, {0})
            for pid in (connector.pid, 0):
                os.sched_setaffinity(pid, {1})
            if pg_name is not None:
                # The local PostgreSQL server moves to the second core too, as a database on its own
                # host would be; given back below.
                pinned.enter_context(postgres_on(1))
        try:
            figures = asyncio.run(engine_bench(connector_url, key, args.turns))
            print(
                f"engine, {figures['turns']:.0f} turns: engine time p50 {figures['engine_p50']:.2f} ms, "
                f"p99 {figures['engine_p99']:.2f} ms, max {figures['engine_max']:.2f} ms; "
                f"tool wait (connector on loopback) p50 {figures['tool_p50']:.2f} ms, p99 {figures['tool_p99']:.2f} ms"
            )
            platform_url = f"http://127.0.0.1:{platform_port}"
            cpu_before = cpu_seconds(platform.pid)
            connector_before, client_before = cpu_seconds(connector.pid), time.process_time()
            result = asyncio.run(
                sessions_bench(platform_url, connector_url, key, args.sessions, profiled=bool(args.profile))
            )
            requests = max(result["requests"], 1)
            cpu_ms = (cpu_seconds(platform.pid) - cpu_before) * 1000 / requests
            connector_ms = (cpu_seconds(connector.pid) - connector_before) * 1000 / requests
            client_ms = (time.process_time() - client_before) * 1000 / requests
            if args.profile:
                import pstats

                calls = pstats.Stats(args.profile).total_calls  # type: ignore[attr-defined]
                print(
                    f"profile: {calls / requests:,.0f} function calls and "
                    f"{result['statements'] / requests:.2f} SQL statements per request (event loop "
                    f"thread, the burst only) in {args.profile}"
                )
            print(
                f"HTTP, {result['sessions']:.0f} concurrent sessions ({result['requests']:.0f} requests) on one "
                f"worker, {'PostgreSQL' if pg_name else 'SQLite'}: {result['errors']:.0f} errors, {result['still_live']:.0f} left live, "
                f"{result['wall_s']:.1f} s wall, {result['turns_per_s']:.0f} turns/s, "
                f"request p50 {result['p50']:.0f} ms, p99 {result['p99']:.0f} ms; "
                f"platform CPU {cpu_ms:.2f} ms per request (connector {connector_ms:.2f} ms, "
                f"this load generator {client_ms:.2f} ms)"
            )
        finally:
            errors = [line for line in Path(tmp, "platform.log").read_text().splitlines() if "error" in line]
            print(f"platform log: {len(errors)} error lines", *(e[:300] for e in errors[:3]), sep="\n  ")
            for proc in (platform, connector):
                proc.terminate()
                proc.wait(timeout=10)
            pinned.close()
            if pg_name is not None:
                pg.drop_database(pg_name)


if __name__ == "__main__":
    main()
