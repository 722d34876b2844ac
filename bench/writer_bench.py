"""A conversation turn's write on PostgreSQL, side by side: one statement vs BEGIN, the statements, COMMIT.

``kit.postgres.PooledWriter`` sends a turn (the version-checked ``UPDATE ... RETURNING`` of its session
and the request's audit event) as one statement (``merged_transaction``); a shape it cannot merge runs
as ``BEGIN``, each statement and ``COMMIT``. This runs the same turns both ways in one process on a
fresh migrated database on 127.0.0.1:5432, alternating blocks of each (so the machine's load falls on
both alike), and prints the CPU and wall time per transaction, medians of the blocks.

    PYTHONPATH=src .venv/bin/python bench/writer_bench.py [--blocks 10] [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import migrated, pg

from parley.audit.service import _INSERT_EVENT
from parley.kit import postgres as kit_postgres
from parley.kit.db import create_engine
from parley.kit.postgres import PooledWriter
from parley.sessions.service import _INSERT_SESSION, _WRITE_TURN


def session_row(session_id: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        **dict.fromkeys(("outcome", "end_reason", "callee", "ended_at")),
        "id": session_id,
        "flow_id": "flw_bench",
        "flow_version": 1,
        "channel": "web",
        "direction": "inbound",
        "voiced": False,
        "voice_connected": False,
        "status": "active",
        "caller": "+15550100",
        "language": "de",
        "state": {"node": "ask", "variables": {"order": "17"}, "history": ["x" * 40] * 8},
        "version": 1,
        "started_at": now,
        "last_activity_at": now,
        "created_by": "usr_bench",
        "organization_id": "org_bench",
        "created_at": now,
        "updated_at": now,
    }


def turn(session_id: str, version: int, event_id: str) -> list[tuple[Any, dict[str, Any]]]:
    now = datetime.now(UTC)
    values = {
        "in_organization": "org_bench",
        "in_session": session_id,
        "read_version": version,
        "new_state": {"node": "tell", "variables": {"order": "17"}, "history": ["x" * 40] * 8},
        "new_language": "de",
        "now": now,
    }
    event = {
        **dict.fromkeys(("ip", "user_agent")),
        "id": event_id,
        "organization_id": "org_bench",
        "actor_type": "user",
        "actor_id": "usr_bench",
        "action": "session.message",
        "resource_type": "session",
        "resource_id": session_id,
        "method": "POST",
        "path": f"/api/sessions/{session_id}/messages",
        "request_id": event_id,
        "details": {"turn": version},
        "created_at": now,
    }
    return [(_WRITE_TURN, values), (_INSERT_EVENT, event)]


async def measure(url: str, blocks: int, turns: int) -> None:
    engine = create_engine(url, pool_size=2)
    merged = PooledWriter(engine)
    several = PooledWriter(engine)
    versions = {"merged": 1, "several": 1}
    writers = {"merged": merged, "several": several}
    merge = kit_postgres.merged_transaction
    for name, writer in writers.items():
        if name == "several":  # this writer keeps "not mergeable": BEGIN, the statements, COMMIT
            kit_postgres.merged_transaction = lambda _prepared: None  # type: ignore[assignment]
        try:
            # A statement is prepared at its second use (and its merged form built then, once).
            for _ in range(2):
                done, _rows = await writer.transaction([(_INSERT_SESSION, session_row(f"ses_{name}"))])
            for _ in range(2):
                done, _rows = await writer.transaction(turn(f"ses_{name}", versions[name], f"aud_w{name}"))
                versions[name] += done
        finally:
            kit_postgres.merged_transaction = merge
        if versions[name] != 2:
            sys.exit(f"{name}: the warm-up turn was not written")
    # What each writer runs for a turn: one statement, and nothing merged.
    assert any(sql and sql.startswith("WITH") for sql in merged._merged.values())
    assert all(sql is None or not sql.startswith("WITH") for sql in several._merged.values())
    cpu: dict[str, list[float]] = {"merged": [], "several": []}
    wall: dict[str, list[float]] = {"merged": [], "several": []}
    for block in range(blocks):
        for name in ("merged", "several") if block % 2 else ("several", "merged"):
            writer = writers[name]
            started_cpu, started = time.process_time(), time.perf_counter()
            for i in range(turns):
                done, _rows = await writer.transaction(
                    turn(f"ses_{name}", versions[name], f"aud_{name}_{block}_{i}")
                )
                if not done:
                    sys.exit(f"{name}: a turn was not written")
                versions[name] += 1
            cpu[name].append((time.process_time() - started_cpu) / turns * 1e6)
            wall[name].append((time.perf_counter() - started) / turns * 1e6)
    await engine.dispose()
    print(
        "| per transaction (median of the blocks) | BEGIN, UPDATE, INSERT, COMMIT | one statement | ratio |"
    )
    print("|---|---|---|---|")
    for label, figures in (("CPU µs", cpu), ("wall µs", wall)):
        before, after = statistics.median(figures["several"]), statistics.median(figures["merged"])
        print(f"| {label} | {before:,.0f} | {after:,.0f} | {after / before:.2f} |")
    print(f"{blocks} blocks of {turns} turns each way, alternating")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    name, url = migrated.postgres("parley_writer_bench")
    try:
        asyncio.run(measure(url, args.blocks, args.turns))
    finally:
        pg.drop_database(name)


if __name__ == "__main__":
    main()
