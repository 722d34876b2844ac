"""Profile the conversation turn over HTTP in process: CPU per request, and where it goes.

Starts the order connector (one uvicorn worker on loopback, as ``bench/runtime_bench.py`` does), builds
the platform app in this process on a fresh SQLite database (or PostgreSQL with ``--postgresql``),
creates an organization, the ``order_lookup`` tool and the demo order flow through the API, then runs
conversations one after another as raw ASGI calls: ``POST /api/sessions``, the order number, "nein",
"nein" (four requests, the last one ends the session and writes its call record). No HTTP server and
no client on the platform's side, so the figure is the app's own CPU time per request; the tool call
to the connector is real HTTP (its client side is in the figure, the connector's work is not).

    .venv/bin/python bench/turn_profile.py [--conversations 300] [--postgresql]

Where the time goes, with py-spy (``pip install py-spy``; not a project dependency):

    py-spy record -r 300 -f raw -o /tmp/turn.raw -- .venv/bin/python bench/turn_profile.py
    .venv/bin/python bench/turn_profile.py --shares /tmp/turn.raw
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import gc
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.request_profile import profiled_platform, request_samples, send_request
from bench.runtime_bench import free_port, order_flow, prepare_connector, start

T = TypeVar("T")
REQUEST_FRAME = "turn_profile.py:"


def shares(raw_path: str, top: int = 60) -> None:
    """Inclusive share of each function among the samples taken while a request ran."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, samples in request_samples(raw_path, REQUEST_FRAME):
        total += samples
        start_at = next(i for i, frame in enumerate(frames) if "send_request (" in frame)
        seen = set()
        for frame in frames[start_at + 1 :]:
            name = frame.split(":")[0].split("site-packages/")[-1].split("src/")[-1]
            if name not in seen:
                seen.add(name)
                inclusive[name] += samples
    if not total:
        sys.exit(f"no request samples in {raw_path}")
    print(f"{total} samples while a request ran\n\n| function (inclusive) | share |\n|---|---|")
    for name, samples in inclusive.most_common(top):
        print(f"| {name} | {samples / total * 100:.1f} % |")


async def post(
    app: Any, path: str, headers: list[tuple[bytes, bytes]], body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    status, raw = await send_request(app, path, headers, method="POST", body=body)
    return status, json.loads(raw) if raw else {}


STEPS = ("open the session", "the order number (tool call)", "'nein' (cost)", "'nein' (ends, call record)")
STEP_CPU: collections.Counter[str] = collections.Counter()
ENGINE_CPU: collections.Counter[str] = collections.Counter()
ENGINE_STEP = [STEPS[0]]
# --count-calls: one profiler per step counts the Python and C function calls of its requests on the
# event loop's thread, a figure that does not move with the machine's load (CPU times here do).
CALL_COUNTERS: dict[str, cProfile.Profile] = {}


async def counted(name: str, request: Awaitable[T]) -> T:
    counter = CALL_COUNTERS.get(name)
    if counter is None:
        return await request
    counter.enable()
    try:
        return await request
    finally:
        counter.disable()


# SQL statements (at the cursor) and pool check-outs, counted for every request: figures the machine's
# load does not move, to compare the sequential and the concurrent runs.
DATABASE_WORK: collections.Counter[str] = collections.Counter()
STEP_STATEMENTS: collections.Counter[str] = collections.Counter()  # by step (the request's)


def count_database_work() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    def statement(*_args: Any) -> None:
        DATABASE_WORK["statements"] += 1
        STEP_STATEMENTS[ENGINE_STEP[0]] += 1

    def checkout(*_args: Any) -> None:
        DATABASE_WORK["check-outs"] += 1

    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Pool, "checkout", checkout)


def database_work(requests: int) -> str:
    names = (
        ("statements", "check-outs", "round trips")
        if DATABASE_WORK["round trips"]
        else ("statements", "check-outs")
    )
    return ", ".join(f"{DATABASE_WORK[name] / requests:.2f} {name}" for name in names)


# PostgreSQL: the messages asyncpg sends that wait for the server's answer, one round trip each (a
# prepare, a bound execution, a plain query such as BEGIN/COMMIT, a statement closed), counted at each
# connection's protocol. The statements above are SQLAlchemy's cursor's only: kit.postgres's reader and
# writer send theirs on asyncpg directly.
ROUND_TRIPS = frozenset(
    {"query", "prepare", "bind_execute", "bind_execute_many", "bind", "execute", "close_statement"}
)
STEP_ROUND_TRIPS: collections.Counter[str] = collections.Counter()


class CountedProtocol:
    """An asyncpg connection's protocol, noting each round-trip call (the rest passes through)."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._protocol, name)
        if name not in ROUND_TRIPS:
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            DATABASE_WORK["round trips"] += 1
            STEP_ROUND_TRIPS[ENGINE_STEP[0]] += 1
            return attribute(*args, **kwargs)

        return counted


def count_round_trips() -> None:
    import asyncpg

    connect = asyncpg.connect

    async def counted_connect(*args: Any, **kwargs: Any) -> Any:
        connection = await connect(*args, **kwargs)
        connection._protocol = CountedProtocol(connection._protocol)
        return connection

    asyncpg.connect = counted_connect  # the platform's engine looks it up at each connect


def time_the_engine() -> None:
    """Count the CPU spent inside ``FlowEngine.start``/``handle`` (the engine, its tool calls' client
    side included) apart from the work around it, per step."""
    from parley.runtime.engine import FlowEngine

    def timed(method: Any) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return await method(*args, **kwargs)
            finally:
                ENGINE_CPU[ENGINE_STEP[0]] += time.process_time() - started

        return wrapper

    FlowEngine.start = timed(FlowEngine.start)  # type: ignore[method-assign]
    FlowEngine.handle = timed(FlowEngine.handle)  # type: ignore[method-assign]


async def conversation(app: Any, headers: list[tuple[bytes, bytes]], flow_id: str, i: int) -> None:
    started = time.process_time()

    def step(name: str) -> None:
        nonlocal started
        now = time.process_time()
        STEP_CPU[name] += now - started
        started = now
        ENGINE_STEP[0] = STEPS[(STEPS.index(name) + 1) % len(STEPS)]

    status, opening = await counted(
        STEPS[0], post(app, "/api/sessions", headers, {"flow_id": flow_id, "channel": "web"})
    )
    step(STEPS[0])
    if status != 200:
        sys.exit(f"POST /api/sessions answered {status}: {opening}")
    path = f"/api/sessions/{opening['id']}/messages"
    status, turn = await counted(
        STEPS[1], post(app, path, headers, {"text": "eins zwei" if i % 2 else "1 7"})
    )
    step(STEPS[1])
    if status != 200 or "Kosten wissen" not in turn.get("reply", ""):
        sys.exit(f"order number turn answered {status}: {turn}")
    for name in STEPS[2:]:
        status, turn = await counted(name, post(app, path, headers, {"text": "nein"}))
        step(name)
        if status != 200:
            sys.exit(f"'nein' answered {status}: {turn}")
    if turn.get("outcome") != "completed":
        sys.exit(f"the conversation did not complete: {turn}")


async def measure(
    app: Any,
    token: str,
    connector_key: str,
    conversations: int,
    count_calls: bool = False,
    concurrent: int = 0,
) -> None:
    import httpx

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://profile") as client:
            auth = {"Authorization": f"Bearer {token}"}
            organization = (
                await client.post("/api/organizations", json={"name": "Profile"}, headers=auth)
            ).json()
            auth["X-Organization-Id"] = organization["id"]
            tool = {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector_key}}
            answer = await client.post("/api/tools", json=tool, headers=auth)
            if answer.status_code != 200:
                sys.exit(f"POST /api/tools answered {answer.status_code}: {answer.text}")
            flow = (
                await client.post(
                    "/api/flows", json={"name": "Orders", "definition": order_flow()}, headers=auth
                )
            ).json()
            answer = await client.post(f"/api/flows/{flow['id']}/publish", headers=auth)
            if answer.status_code != 200:
                sys.exit(f"publish answered {answer.status_code}: {answer.text}")
        headers = [(name.lower().encode(), value.encode()) for name, value in auth.items()]
        headers.append((b"host", b"profile"))
        for i in range(30):  # warm-up: caches, pools, statement caches
            await conversation(app, headers, flow["id"], i)
        STEP_CPU.clear()
        ENGINE_CPU.clear()
        DATABASE_WORK.clear()
        STEP_STATEMENTS.clear()
        STEP_ROUND_TRIPS.clear()
        if concurrent >= 1:
            await measure_concurrent(app, headers, flow["id"], conversations, concurrent, count_calls)
            return
        if count_calls:
            CALL_COUNTERS.update((name, cProfile.Profile()) for name in STEPS)
        # Five slices: the fastest is the figure other processes on a shared machine disturbed least.
        slices: list[float] = []
        size = max(conversations // 5, 1)
        loop_cpu = 0.0
        for _ in range(5):
            started, loop_started = time.process_time(), time.thread_time()
            for i in range(size):
                await conversation(app, headers, flow["id"], i)
            slices.append((time.process_time() - started) / (size * 4))
            loop_cpu += time.thread_time() - loop_started
        print("| request | CPU ms | in the engine | around the engine |\n|---|---|---|---|")
        for name in STEPS:
            total, inside = (STEP_CPU[name] / (size * 5) * 1e3, ENGINE_CPU[name] / (size * 5) * 1e3)
            print(f"| {name} | {total:.2f} | {inside:.2f} | {total - inside:.2f} |")
        if count_calls:
            print("| request | function calls | statements | round trips (PostgreSQL) |\n|---|---|---|---|")
            for name in STEPS:
                calls = pstats.Stats(CALL_COUNTERS[name]).total_calls  # type: ignore[attr-defined]
                print(
                    f"| {name} | {calls / (size * 5):,.0f} | {STEP_STATEMENTS[name] / (size * 5):.2f} "
                    f"| {STEP_ROUND_TRIPS[name] / (size * 5):.2f} |"
                )
                if os.environ.get("PROFILE_DUMP"):  # one file per step: PROFILE_DUMP.<step number>
                    CALL_COUNTERS[name].dump_stats(f"{os.environ['PROFILE_DUMP']}.{STEPS.index(name)}")
        print(f"event loop thread: {loop_cpu / (size * 20) * 1e3:.2f} ms per request")
        print(f"per request: {database_work(size * 20)}")
        print(
            f"{size * 5} conversations ({size * 20} requests): {sum(slices) / len(slices) * 1e3:.2f} ms CPU "
            f"per request (in process, sequential; fastest fifth {min(slices) * 1e3:.2f} ms)"
        )


async def measure_concurrent(
    app: Any,
    headers: list[tuple[bytes, bytes]],
    flow_id: str,
    conversations: int,
    concurrent: int,
    count_calls: bool = False,
) -> None:
    """``concurrent`` conversations at a time, as the burst runs them but without HTTP: the CPU per
    request against the sequential figure shows what the concurrency itself costs. With
    ``count_calls`` one profiler counts every function call on the event loop's thread (the requests
    interleave, so per request and not per step), to compare with the sequential count."""
    slices: list[float] = []
    counter = cProfile.Profile() if count_calls else None
    loop_cpu = 0.0
    for _ in range(5):
        started, loop_started = time.process_time(), time.thread_time()
        if counter is not None:
            counter.enable()
        await asyncio.gather(*(conversation(app, headers, flow_id, i) for i in range(concurrent)))
        if counter is not None:
            counter.disable()
        slices.append((time.process_time() - started) / (concurrent * 4))
        loop_cpu += time.thread_time() - loop_started
    if counter is not None:
        calls = pstats.Stats(counter).total_calls  # type: ignore[attr-defined]
        print(f"function calls per request: {calls / (concurrent * 20):,.0f}")
        if os.environ.get("PROFILE_DUMP"):  # per-function counts, for comparing two runs
            counter.dump_stats(os.environ["PROFILE_DUMP"])
    print(
        f"{concurrent} conversations at once, 5 times ({concurrent * 20} requests): "
        f"{sorted(slices)[2] * 1e3:.2f} ms CPU per request (median of the five; "
        + ", ".join(f"{s * 1e3:.2f}" for s in slices)
        + f"); per request: {database_work(concurrent * 20)}; "
        + f"event loop thread: {loop_cpu / (concurrent * 20) * 1e3:.2f} ms per request"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--postgresql", action="store_true", help="a fresh database on 127.0.0.1:5432")
    parser.add_argument(
        "--count-calls", action="store_true", help="count each request's function calls (slower CPU figures)"
    )
    parser.add_argument(
        "--concurrent",
        type=int,
        default=0,
        metavar="N",
        help="run N conversations at once (five rounds) and print only the CPU per request "
        "(1: one after another, the same measurement)",
    )
    parser.add_argument("--shares", metavar="RAW", help="print the shares of a py-spy raw profile instead")
    parser.add_argument(
        "--gc-off", action="store_true", help="disable the garbage collector (a switch for the burst's CPU)"
    )
    args = parser.parse_args()
    if args.gc_off:
        gc.disable()
    if args.shares:
        shares(args.shares)
        return
    with tempfile.TemporaryDirectory(prefix="parley-turn-profile-") as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
        connector_env = {
            **base,
            "PARLEY_CONNECTOR_DATA_DIR": f"{tmp}/connector",
            "PARLEY_CONNECTOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/connector.db",
            "PARLEY_CONNECTOR_RATE_LIMIT": "0",
            "PARLEY_CONNECTOR_LOG_LEVEL": "WARNING",
        }
        connector_key = prepare_connector(connector_env)
        connector_port = free_port()
        connector = start(
            "parley.connector.app:create_app_from_env",
            connector_port,
            connector_env,
            Path(tmp, "connector.log"),
        )
        try:
            with profiled_platform(
                f"{tmp}/platform",
                postgresql=args.postgresql,
                PARLEY_CONNECTOR_URL=f"http://127.0.0.1:{connector_port}",
                # As bench/runtime_bench.py serves the platform (--concurrent needs the pool).
                PARLEY_DB_POOL_SIZE="64",
                PARLEY_DB_POOL_TIMEOUT="300",
            ) as token:
                from parley.app import create_app_from_env

                time_the_engine()
                count_database_work()
                if args.postgresql:
                    count_round_trips()

                asyncio.run(
                    measure(
                        create_app_from_env(),
                        token,
                        connector_key,
                        args.conversations,
                        args.count_calls,
                        args.concurrent,
                    )
                )
        finally:
            connector.kill()
            connector.wait()


if __name__ == "__main__":
    main()
