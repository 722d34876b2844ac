"""Benchmark: evaluation runs.

200 scripted text scenarios of the demo order-status agent (the demo suite's 10 scenarios, 20 times),
German and English, with the order lookup going to the real order connector (one uvicorn worker) on
loopback:

1. **Platform**: one platform process (one uvicorn worker, its embedded job runner, SQLite or with
   ``--postgres`` PostgreSQL) runs the suite: ``POST /api/evaluations/runs``, then polling until the
   run is completed. Reports the wall time, the server's own run time (created → finished), the pass
   count and the engine's own time per turn from the results.
2. **Baseline**, in the same invocation: the same 200 scenarios run by the bare flow engine in this
   process (``run_scenario`` with the connector called directly, no database), for the engine's time
   per turn side by side.

    .venv/bin/python bench/eval_bench.py [--copies 20] [--postgres] [--voice]

With ``--voice`` the demo suite (10 scenarios) also runs once in voice mode on the English agent:
recognition accuracy and voice-to-voice latency per scenario and per language.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.runtime_bench import (  # noqa: E402
    JWT_SECRET,
    PYTHON,
    ConnectorTools,
    free_port,
    pct,
    prepare_connector,
    start,
)
from parley.demo.flows import order_status_flow  # noqa: E402
from parley.demo.suite import demo_scenarios  # noqa: E402
from parley.evaluations.runner import MockedTools, run_scenario  # noqa: E402
from parley.evaluations.schemas import Scenario  # noqa: E402
from parley.flows.definition import FlowDefinition  # noqa: E402
from parley.runtime.engine import FlowEngine  # noqa: E402


def scenarios(copies: int) -> list[dict[str, Any]]:
    return [s | {"name": f"{s['name']} #{i + 1}"} for i in range(copies) for s in demo_scenarios()]


async def baseline(connector: str, key: str, items: list[dict[str, Any]]) -> dict[str, float]:
    definition = FlowDefinition.model_validate(order_status_flow("de"))
    engine_ms: list[float] = []
    passed = 0
    async with httpx.AsyncClient() as http:
        tools = ConnectorTools(http, connector, key)
        started = time.perf_counter()
        for number, data in enumerate(items):
            scenario = Scenario.model_validate(data)
            engine = FlowEngine(definition, tools=MockedTools(tools, scenario.mocks))
            outcome = await run_scenario(engine, scenario, session_id=f"bench_{number}", llm=None)
            passed += outcome.status == "passed"
            assert outcome.conversation is not None
            engine_ms += [t.engine_ms for t in outcome.conversation.turns]
        wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "passed": passed,
        "engine_p50": pct(engine_ms, 50),
        "engine_p99": pct(engine_ms, 99),
    }


async def platform_run(
    platform: str,
    key: str,
    items: list[dict[str, Any]],
    mode: str = "text",
    language: str = "de",
    pace: str | None = None,
) -> dict[str, Any]:
    import jwt

    now = int(time.time())
    token = jwt.encode({"sub": "bench", "iat": now, "exp": now + 3600}, JWT_SECRET, algorithm="HS256")
    async with httpx.AsyncClient(
        base_url=platform, headers={"Authorization": f"Bearer {token}"}, timeout=300
    ) as c:
        c.headers["X-Organization-Id"] = (await c.post("/api/organizations", json={"name": "Bench"})).json()[
            "id"
        ]
        tool = {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": key}}
        assert (await c.post("/api/tools", json=tool)).status_code == 200
        definition = order_status_flow(language)
        flow = (await c.post("/api/flows", json={"name": f"Orders {mode}", "definition": definition})).json()
        dataset = (await c.post("/api/datasets", json={"name": f"Bench suite {mode}"})).json()
        suite = await c.put(f"/api/evaluations/suites/{dataset['id']}", json={"flow_id": flow["id"]})
        assert suite.status_code == 200, suite.text
        added = await c.post(
            f"/api/datasets/{dataset['id']}/items", json={"items": [{"data": s} for s in items]}
        )
        assert added.status_code == 200, added.text
        started = time.perf_counter()
        body: dict[str, Any] = {"suite": dataset["id"], "flow_id": flow["id"], "mode": mode}
        if pace is not None:
            body["voice"] = {"pace": pace}
        run = (await c.post("/api/evaluations/runs", json=body)).json()
        while run["status"] in ("queued", "running"):
            await asyncio.sleep(0.2)
            run = (await c.get(f"/api/evaluations/runs/{run['id']}")).json()
        wall = time.perf_counter() - started
        engine_ms: list[float] = []
        results: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
            page = (await c.get(f"/api/evaluations/runs/{run['id']}/results", params=params)).json()
            engine_ms += [t["engine_ms"] for r in page["items"] for t in r["turns"]]
            results += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                break
    server = (
        (_time(run["finished_at"]) - _time(run["created_at"]))
        if run["finished_at"] and run["created_at"]
        else None
    )
    return {
        "wall_s": wall,
        "server_s": server,
        "counts": run["counts"],
        "status": run["status"],
        "engine_p50": pct(engine_ms, 50),
        "engine_p99": pct(engine_ms, 99),
        "turn_p50": run["summary"].get("turn_ms_p50"),
        "results": results,
    }


def voice_figures(results: list[dict[str, Any]]) -> None:
    """Per scenario and per language: words heard as said and voice-to-voice latency."""
    by_language: dict[str, tuple[list[float], list[float]]] = {}
    for result in results:
        voiced = [t["voice"] for t in result["turns"] if t.get("voice") and t["voice"].get("said")]
        accuracy = [v["recognition_accuracy"] for v in voiced]
        latency = [v["voice_to_voice_ms"] for v in voiced if v.get("voice_to_voice_ms") is not None]
        language = result["name"][:2]
        by_language.setdefault(language, ([], []))[0].extend(accuracy)
        by_language[language][1].extend(latency)
        heard = "; ".join(f"{v['said']!r} -> {v['heard']!r} ({v['voice_to_voice_ms']} ms)" for v in voiced)
        print(f"  {result['name']}: {result['status']} {result['reason'] or ''} | {heard}")
    for language, (accuracy, latency) in sorted(by_language.items()):
        mean = f"{sum(accuracy) / len(accuracy):.2f}" if accuracy else "-"
        p50 = f"{pct(latency, 50):.0f} ms" if latency else "-"
        p95 = f"{pct(latency, 95):.0f} ms" if latency else "-"
        print(
            f"voice, {language}: words heard as said {mean} over {len(accuracy)} turns; "
            f"voice-to-voice p50 {p50}, p95 {p95}"
        )


def _time(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--copies", type=int, default=20, help="Copies of the 10 demo scenarios.")
    parser.add_argument("--postgres", action="store_true", help="Run the platform on PostgreSQL.")
    parser.add_argument("--voice", action="store_true", help="Also run the demo suite once in voice mode.")
    parser.add_argument(
        "--pace",
        choices=["fast", "realtime", "both"],
        default="both",
        help="Voice mode's pace (both: fast, then realtime).",
    )
    args = parser.parse_args()
    items = scenarios(args.copies)
    pg_name: str | None = None
    if args.postgres:
        from tests import pg

        pg_name, pg_url = pg.create_database("parley_eval_bench")
    with tempfile.TemporaryDirectory(prefix="parley-eval-bench-") as tmp:
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
        }
        if pg_name is not None:
            platform_env["PARLEY_DATABASE_URL"] = pg_url
        subprocess.run([PYTHON, "-m", "parley", "db", "upgrade"], env=platform_env, check=True, cwd=ROOT)
        connector = start(
            "parley.connector.app:create_app_from_env",
            connector_port,
            connector_env,
            Path(tmp, "connector.log"),
        )
        platform = start(
            "parley.app:create_app_from_env", platform_port, platform_env, Path(tmp, "platform.log")
        )
        try:
            bare = asyncio.run(baseline(connector_url, key, items))
            print(
                f"baseline, bare engine in process, {len(items)} scenarios: {bare['wall_s']:.2f} s, "
                f"{bare['passed']:.0f} passed; engine time per turn p50 {bare['engine_p50']:.2f} ms, "
                f"p99 {bare['engine_p99']:.2f} ms"
            )
            run = asyncio.run(platform_run(f"http://127.0.0.1:{platform_port}", key, items))
            engine = "PostgreSQL" if pg_name else "SQLite"
            print(
                f"platform run, one process, {engine}, {len(items)} scenarios: {run['status']}, "
                f"{run['counts']}; wall {run['wall_s']:.2f} s (server {run['server_s']:.2f} s); "
                f"engine time per turn p50 {run['engine_p50']:.2f} ms, p99 {run['engine_p99']:.2f} ms; "
                f"turn (engine+tool) p50 {run['turn_p50']} ms"
            )
            paces = ["fast", "realtime"] if args.pace == "both" else [args.pace]
            for pace in paces if args.voice else []:
                # Each language's scenarios against the agent of that language (the German one is heard
                # by the experimental offline German recognizer: its figures show how far it is).
                for language, agent in (("en", "English"), ("de", "German")):
                    spoken = [s for s in demo_scenarios() if s["language"] == language]
                    voiced = asyncio.run(
                        platform_run(
                            f"http://127.0.0.1:{platform_port}", key, spoken, "voice", language, pace
                        )
                    )
                    print(
                        f"voice mode ({pace} pace), demo suite on the {agent} agent: {voiced['counts']}; "
                        f"wall {voiced['wall_s']:.1f} s"
                    )
                    voice_figures(voiced["results"])
        finally:
            errors = [line for line in Path(tmp, "platform.log").read_text().splitlines() if "error" in line]
            print(f"platform log: {len(errors)} error lines", *(e[:300] for e in errors[:3]), sep="\n  ")
            # Stop both before waiting: a platform slow to stop (a decode in flight) must not leave the
            # connector running after the bench.
            for proc in (platform, connector):
                proc.terminate()
            for proc in (platform, connector):
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if pg_name is not None:
                pg.drop_database(pg_name)


if __name__ == "__main__":
    main()
