"""Benchmark: the call list (``GET /api/calls?limit=50``) over 10,000 call records, beside a bare ASGI app.

Each engine gets a migrated database per source tree, seeded with the same rows (bulk Core inserts,
a fixed random seed): the listed organization's 10,000 calls and 1,000 for each of three other
organizations, with transcripts, tool calls, per-turn metrics, variables, brain signals, post-call
analyses and recordings as ``record_call`` writes them, and mixed channels, directions and outcomes.
Four requests are measured: the first page, a page 5,000 calls further in (``cursor``), and both
again with the console's outcome filter (``outcome=abandoned``); a fifth, a caller without calls (an
empty page), is the floor: everything but the rows. Before measuring, every tree must
answer every request with the same bytes.

The server is one ``parley serve`` worker pinned to core 0; wrk (64 keep-alive connections) runs on
core 1; the baseline is ``bench/bare_asgi.py`` returning the first page's bytes. Candidates alternate
over several rounds in one run (the trees' order flips every round); medians are reported.

    PYTHONPATH=src .venv/bin/python bench/calls_list_bench.py [--duration 5] [--rounds 3]
        [--engines sqlite,postgresql] [--before /path/to/older/src] [--profile out.txt] [--database-core]

``--database-core`` moves the local PostgreSQL server to wrk's core during the PostgreSQL rounds (a
database on a host of its own); without it the database's backends share the server's core.

``--before`` adds another source tree (``git archive <commit> src``) with its own database, migrated by
that tree, as a further candidate. ``--profile out`` records an extra first-page load of each tree in
the first round with py-spy (raw format, 250 Hz) into ``out.<engine>.<tree>``.

Needs wrk and, for PostgreSQL, the server on 127.0.0.1:5432.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, text  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402
from ulid import ULID  # noqa: E402

from bench.pinning import postgres_on  # noqa: E402
from bench.platform_bench import PY, _free_port, cpu_seconds, drop, prepare, server, wrk  # noqa: E402
from parley.brain.models import BrainSignal  # noqa: E402
from parley.calls.models import Call  # noqa: E402
from parley.kit.pagination import encode_cursor  # noqa: E402

LISTED_CALLS = 10_000
OTHER_ORGANIZATIONS = 3
OTHER_CALLS = 1_000
FILTER = ("outcome", "abandoned")
EMPTY = "empty page (a caller without calls)"
END = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
PY_SPY = Path(sys.executable).parent / "py-spy"

CALLER_LINES = [
    "Ich möchte wissen, wo meine Bestellung {order} ist.",
    "Hallo, ich rufe wegen meiner Lieferung {order} an, die ist immer noch nicht da.",
    "Können Sie mich bitte morgen Vormittag zurückrufen?",
    "Die Rechnungsadresse ist falsch, können Sie das ändern?",
    "I'd like to check the status of order {order}, please.",
    "Das ist jetzt schon das dritte Mal, dass ich anrufe, ich bin wirklich verärgert.",
    "Ja, genau, die Nummer ist {order}.",
    "Can I talk to a real person about a refund?",
    "Prima, danke schön.",
    "Nein, das war alles. Tschüss!",
]
AGENT_LINES = [
    "Guten Tag, hier ist der Bestellservice von Müller & Söhne. Wie kann ich Ihnen helfen?",
    "Einen Moment bitte, ich schaue mir die Bestellung {order} an.",
    "Ihre Bestellung {order} wurde gestern verschickt und kommt voraussichtlich morgen an.",
    "Das tut mir leid. Ich verbinde Sie mit einer Kollegin aus dem Kundenservice.",
    "Ich habe Ihren Rückrufwunsch notiert; wir melden uns morgen zwischen 9 und 12 Uhr.",
    "Your order {order} is out for delivery and should arrive today.",
    "Kann ich sonst noch etwas für Sie tun?",
    "Gern geschehen. Auf Wiederhören!",
]
SIGNALS = [
    ("order_not_found", "medium"),
    ("tool_failure", "high"),
    ("callback_requested", "medium"),
    ("transfer_requested", "low"),
    ("negative_sentiment", "medium"),
    ("caller_repeats", "low"),
]


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _ulid(rng: random.Random, at: datetime) -> str:
    millis = int(at.timestamp() * 1000)
    return str(ULID.from_bytes(millis.to_bytes(6, "big") + rng.randbytes(10)))


@dataclass
class Seed:
    calls: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)


def _pick(rng: random.Random, weighted: dict[str, float]) -> str:
    return rng.choices(list(weighted), weights=list(weighted.values()))[0]


def seed_rows(organization_id: str, count: int, salt: int) -> Seed:
    """``count`` call records of one organization, the same for every tree (fixed seed)."""
    rng = random.Random(16_000 + salt)
    flows = [f"flow_{_ulid(rng, END - timedelta(days=200))}" for _ in range(5)]
    callers = [
        f"+49{rng.randrange(150, 180)}{rng.randrange(10**7, 10**8)}" for _ in range(max(20, count // 5))
    ]
    seed = Seed()
    now = END + timedelta(hours=1)
    for _ in range(count):
        started = END - timedelta(seconds=rng.uniform(0, 90 * 86_400))
        call_id = f"call_{_ulid(rng, started)}"
        channel = _pick(rng, {"phone": 55, "web": 30, "whatsapp": 10, "test": 5})
        voice = channel == "phone"
        direction = "outbound" if voice and rng.random() < 0.15 else "inbound"
        outcome = _pick(rng, {"completed": 68, "transferred": 12, "abandoned": 14, "failed": 6})
        order = f"A-{rng.randrange(1000, 9999)}"
        turns: list[dict[str, Any]] = []
        at = started
        for index in range(rng.randrange(4, 25)):
            speaker = "agent" if index % 2 == 0 else "caller"
            line = rng.choice(AGENT_LINES if speaker == "agent" else CALLER_LINES).format(order=order)
            turns.append(
                {
                    "index": index,
                    "speaker": speaker,
                    "text": line,
                    "at": _iso(at),
                    "node_id": f"n_{rng.randrange(1, 12)}" if speaker == "agent" else None,
                    "engine_ms": round(rng.uniform(3, 40), 1) if speaker == "agent" else None,
                }
            )
            at += timedelta(seconds=rng.uniform(2, 12))
        ended = at + timedelta(seconds=rng.uniform(1, 5))
        tools = [
            {
                "tool_id": "tool_01ORDERLOOKUP",
                "tool_name": "order_lookup",
                "node_id": "n_lookup",
                "arguments": {"order_number": order},
                "status": status,
                "http_status": {"ok": 200, "not_found": 404, "error": 502, "timeout": None}[status],
                "latency_ms": round(rng.uniform(40, 900), 1),
                "result": {"success": status == "ok", "status": "shipped"} if status == "ok" else None,
                "error": None if status in ("ok", "not_found") else "upstream failed",
                "at": _iso(started + timedelta(seconds=6)),
            }
            for status in rng.choices(
                ["ok", "not_found", "error", "timeout"], [85, 8, 5, 2], k=rng.randrange(0, 4)
            )
        ]
        metrics = [
            {
                "turn_index": t["index"],
                "engine_ms": t["engine_ms"],
                "tool_ms": round(rng.uniform(40, 300), 1) if tools else None,
                "llm_total_ms": round(rng.uniform(300, 1800), 1),
                "stt_final_ms": round(rng.uniform(80, 400), 1) if voice else None,
                "stt_engine_ms": round(rng.uniform(20, 120), 1) if voice else None,
                "llm_first_token_ms": round(rng.uniform(200, 900), 1),
                "tts_first_byte_ms": round(rng.uniform(90, 400), 1) if voice else None,
                "voice_to_voice_ms": round(rng.uniform(600, 2400), 1) if voice else None,
                "hangover_ms": 300.0 if voice else None,
                "interrupted": (rng.random() < 0.1) if voice else None,
            }
            for t in turns
            if t["speaker"] == "agent"
        ]
        voice_values = [m["voice_to_voice_ms"] for m in metrics if m["voice_to_voice_ms"] is not None]
        types = (
            sorted({t for t, _ in rng.sample(SIGNALS, rng.choice([1, 1, 2]))}) if rng.random() < 0.22 else []
        )
        analysed = rng.random() < 0.4
        callback = rng.random() < 0.3
        extracted = {"callback_requested": callback, "preferred_time": "morgen um 10" if callback else None}
        recording = f"rec_{call_id}.wav" if voice and rng.random() < 0.9 else None
        seed.calls.append(
            {
                "id": call_id,
                "organization_id": organization_id,
                "session_id": f"ses_{_ulid(rng, started)}",
                "flow_id": rng.choice(flows),
                "flow_version": rng.randrange(1, 9),
                "channel": channel,
                "direction": direction,
                "caller": rng.choice(callers) if channel != "web" else None,
                "callee": "+4930999000" if voice else None,
                "language": rng.choice(["de", "de", "de", "en"]),
                "started_at": started,
                "ended_at": ended,
                "duration_seconds": (ended - started).total_seconds(),
                "outcome": outcome,
                "end_reason": {"completed": "caller_hung_up", "transferred": "transferred"}.get(
                    outcome, outcome
                ),
                "transferred_to": "+4930555000" if outcome == "transferred" else None,
                "transferred_at": ended if outcome == "transferred" else None,
                "transfer_status": "transferred" if outcome == "transferred" else None,
                "transcript": turns,
                "tool_calls": tools,
                "turn_metrics": metrics,
                "variables": {"order_number": order, "customer_name": "Erika Mustermann", "attempts": 1},
                "turn_count": len(turns),
                "mean_voice_latency_ms": round(statistics.fmean(voice_values), 1) if voice_values else None,
                "llm_prompt_tokens": rng.randrange(200, 4000),
                "llm_completion_tokens": rng.randrange(20, 600),
                "tts_characters": rng.randrange(100, 2000) if voice else None,
                "stt_seconds": round(rng.uniform(5, 200), 3) if voice else None,
                "ended_event_pending": False,
                "has_signals": bool(types),
                "signal_types": types,
                "recording_filename": recording,
                "blob_key": f"{organization_id}/recordings/{recording}" if recording else None,
                "analysis_status": "done" if analysed else None,
                "analysis_method": "variables" if analysed else None,
                "summary": (
                    f"{direction.title()} {channel} call, {len(turns)} turns, outcome {outcome}. "
                    f'The caller first said: "{turns[1]["text"] if len(turns) > 1 else ""}"'
                )
                if analysed
                else None,
                "extracted": extracted if analysed else None,
                "extracted_index": {"callback_requested": str(callback).lower()} if analysed else None,
                "analyzed_at": ended + timedelta(seconds=3) if analysed else None,
                "created_at": ended,
                "updated_at": ended,
            }
        )
        for signal_type in types:
            severity = dict(SIGNALS)[signal_type]
            seed.signals.append(
                {
                    "id": f"sig_{_ulid(rng, ended)}",
                    "organization_id": organization_id,
                    "call_id": call_id,
                    "flow_id": seed.calls[-1]["flow_id"],
                    "type": signal_type,
                    "severity": severity,
                    "status": rng.choice(["open", "open", "acknowledged", "resolved"]),
                    "source": "rule",
                    "details": {"turns": [1, 3], "method": "keywords"},
                    "occurred_at": ended,
                    "created_at": now,
                    "updated_at": now,
                }
            )
    return seed


async def insert_seed(url: str, seeds: list[Seed]) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for seed in seeds:
                for start in range(0, len(seed.calls), 1000):
                    await conn.execute(insert(Call.__table__), seed.calls[start : start + 1000])
                for start in range(0, len(seed.signals), 1000):
                    await conn.execute(insert(BrainSignal.__table__), seed.signals[start : start + 1000])
            if not url.startswith("sqlite"):  # what autovacuum does shortly after a bulk load
                await conn.execute(text("ANALYZE calls"))
                await conn.execute(text("ANALYZE brain_signals"))
    finally:
        await engine.dispose()


def profile(pid: int, output: str, seconds: int) -> subprocess.Popen[bytes]:
    """py-spy recording the server in the background (for a wrk run started next)."""
    command = [
        "record",
        "-r",
        "250",
        "-f",
        "raw",
        "--nonblocking",
        "-o",
        output,
        "-p",
        str(pid),
        "-d",
        str(seconds),
    ]
    return subprocess.Popen([str(PY_SPY), *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class Tree:
    label: str
    env: dict[str, str]
    headers: dict[str, str]
    database: str | None


def set_up(engine: str, data_dir: Path, label: str, src: str, port: int) -> tuple[Tree, list[Seed]]:
    """A migrated database for one source tree, its organizations, and its seeded calls."""
    env, database = prepare(engine, data_dir, src)
    token = subprocess.run(
        [PY, "-m", "parley", "token", "create", "--sub", "bench-user", "--ttl", "86400"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}"
    with server([PY, "-m", "parley", "serve", "--port", str(port)], env, f"{base}/healthz"):
        orgs = [
            httpx.post(f"{base}/api/organizations", json={"name": f"Bench {i}"}, headers=headers).json()["id"]
            for i in range(1 + OTHER_ORGANIZATIONS)
        ]
    seeds = [seed_rows(orgs[0], LISTED_CALLS, 0)] + [
        seed_rows(org, OTHER_CALLS, i) for i, org in enumerate(orgs[1:], start=1)
    ]
    url = env.get("PARLEY_DATABASE_URL") or f"sqlite+aiosqlite:///{data_dir / 'parley.db'}"
    asyncio.run(insert_seed(url, seeds))
    return Tree(label, env, {**headers, "X-Organization-Id": orgs[0]}, database), seeds


def paths_of(listed: Seed) -> dict[str, str]:
    newest = sorted((c["id"] for c in listed.calls), reverse=True)
    key, value = FILTER
    filtered = sorted((c["id"] for c in listed.calls if c[key] == value), reverse=True)
    return {
        "first page": "/api/calls?limit=50",
        "page 101 (cursor)": f"/api/calls?limit=50&cursor={encode_cursor(newest[5000 - 1])}",
        f"{key}={value}, first page": f"/api/calls?limit=50&{key}={value}",
        f"{key}={value}, cursor": f"/api/calls?limit=50&{key}={value}"
        f"&cursor={encode_cursor(filtered[len(filtered) // 2 - 1])}",
        # the floor: the same route, dependencies, session and query, with no rows to show
        EMPTY: "/api/calls?limit=50&caller=%2B4900000000",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--before", help="another source tree's src directory, run as a candidate too")
    parser.add_argument("--profile", help="py-spy output files' prefix (an extra first-page run per tree)")
    parser.add_argument(
        "--database-core",
        action="store_true",
        help="move the local PostgreSQL server's processes to wrk's core during the PostgreSQL rounds, as a "
        "database on a host of its own would be (otherwise its backends also run on the server's core)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")

    results: dict[str, list[dict[str, float]]] = {}
    sizes: dict[str, int] = {}
    for engine in args.engines.split(","):
        port, bare_port = _free_port(), _free_port()
        base = f"http://127.0.0.1:{port}"
        serve = [PY, "-m", "parley", "serve", "--port", str(port)]
        with tempfile.TemporaryDirectory() as tmp:
            trees: list[Tree] = []
            pinned = contextlib.ExitStack()
            try:
                sources = [("after", str(ROOT / "src"))] + ([("before", args.before)] if args.before else [])
                for label, src in sources:
                    tree, seeds = set_up(engine, Path(tmp) / label, label, src, port)
                    trees.append(tree)
                print(
                    f"{engine}: seeded {sum(len(s.calls) for s in seeds):,} calls per tree", file=sys.stderr
                )
                paths = paths_of(seeds[0])
                bodies: dict[str, bytes] = {}
                for tree in trees:  # the trees must answer the same bytes
                    with server(serve, tree.env, f"{base}/healthz"):
                        for name, path in paths.items():
                            response = httpx.get(base + path, headers=tree.headers, timeout=60)
                            assert response.status_code == 200, response.text
                            assert len(response.json()["items"]) == (0 if name == EMPTY else 50), name
                            if bodies.setdefault(name, response.content) != response.content:
                                sys.exit(f"{engine}: {tree.label} answers {name} differently")
                sizes.update({name: len(body) for name, body in bodies.items()})
                body_file = Path(tmp) / "body.json"
                body_file.write_bytes(bodies["first page"])
                bare_env = {**trees[0].env, "PARLEY_BENCH_BODY": str(body_file), "PYTHONPATH": str(ROOT)}
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
                    with server(bare, bare_env, f"http://127.0.0.1:{bare_port}/"):
                        results.setdefault("bare ASGI, the first page's bytes", []).append(
                            wrk(f"http://127.0.0.1:{bare_port}/", {}, args.duration)
                        )
                    for tree in trees if round_index % 2 == 0 else trees[::-1]:
                        with server(serve, tree.env, f"{base}/healthz") as process:
                            # warm-up: FastAPI builds its routes lazily, the pool fills, caches load
                            wrk(base + paths["first page"], tree.headers, 3)
                            for name, path in paths.items():
                                wrk(base + path, tree.headers, 1)
                                used = cpu_seconds(process.pid)
                                run = wrk(base + path, tree.headers, args.duration)
                                run["cpu_ms"] = (
                                    (cpu_seconds(process.pid) - used) * 1000 / max(1.0, run["requests"])
                                )
                                results.setdefault(f"{name} ({engine}, {tree.label})", []).append(run)
                            if args.profile and round_index == 0:  # an extra run, not among the figures
                                spy = profile(
                                    process.pid, f"{args.profile}.{engine}.{tree.label}", args.duration - 1
                                )
                                wrk(base + paths["first page"], tree.headers, args.duration)
                                spy.wait()
                    print(f"{engine}: round {round_index + 1}/{args.rounds} done", file=sys.stderr)
            finally:
                pinned.close()
                for tree in trees:
                    if tree.database:
                        drop(tree.database)

    baseline = statistics.median(r["rps"] for r in results["bare ASGI, the first page's bytes"])
    print(f"\nbody bytes: {', '.join(f'{name} {size:,}' for name, size in sizes.items())}")
    print(
        f"\n| candidate | req/s (median of {args.rounds}) | × bare ASGI | p50 ms | p99 ms "
        "| server CPU ms / request | non-2xx + timeouts |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, runs in results.items():
        rps = statistics.median(r["rps"] for r in runs)
        cpu = statistics.median(r["cpu_ms"] for r in runs) if "cpu_ms" in runs[0] else float("nan")
        print(
            f"| {name} | {rps:,.0f} | {rps / baseline:.3f} | {statistics.median(r['p50_ms'] for r in runs):.1f} "
            f"| {statistics.median(r['p99_ms'] for r in runs):.1f} | {cpu:.2f} "
            f"| {int(sum(r['errors'] + r['timeouts'] for r in runs))} |"
        )


if __name__ == "__main__":
    main()
