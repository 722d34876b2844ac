"""Runs through the HTTP API: the demo suite green against the real connector, a broken flow failing
with the right scenarios named, and every scenario accounted for."""

from __future__ import annotations

import copy
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.demo.flows import order_status_flow
from parley.sessions.models import ConversationSession
from tests.evaluations.conftest import Lab


async def test_demo_suite_passes_on_the_draft_without_call_records(
    lab: Lab, demo: list[dict[str, Any]], db_session: AsyncSession
) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite(demo, flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    results = await lab.results(run["id"])
    failing = {r["name"]: (r["reason"], r["failures"]) for r in results if r["status"] != "passed"}
    assert failing == {}
    assert (run["status"], run["passed"], run["total"], run["done"]) == ("completed", True, 10, 10)
    assert run["counts"]["passed"] == 10 and run["flow_version"] is None
    assert run["summary"]["turn_ms_p50"] is not None and run["summary"]["pass_rate"] == 1.0
    known = results[0]
    assert known["name"] == "de: known order, no callback"
    assert known["tool_calls"][0]["tool_name"] == "order_lookup"
    assert known["tool_calls"][0]["http_status"] == 200  # the real connector answered
    assert [t["turn"] for t in known["turns"]] == [
        0,
        1,
        2,
        3,
    ]  # the opening, the order number, yes to the cost, no callback
    assert all(t["total_ms"] >= t["engine_ms"] for t in known["turns"])
    assert known["transcript"][0]["speaker"] == "agent" and known["outcome"] == "completed"
    # No call record, no session row, no brain signal came of ten conversations.
    for model in (Call, ConversationSession, BrainSignal):
        assert await db_session.scalar(select(func.count()).select_from(model)) == 0


async def test_a_broken_version_fails_with_the_scenarios_named(lab: Lab, demo: list[dict[str, Any]]) -> None:
    broken = copy.deepcopy(order_status_flow("de"))
    for node in broken["nodes"]:
        if node["id"] == "say_not_found":  # a regression: the unknown-order line lost its number
            node["text"] = "Den Auftrag finde ich nicht."
    flow_id = await lab.flow(order_status_flow("de"), publish=True)
    await lab.ok(
        await lab.client.patch(f"/api/flows/{flow_id}", json={"definition": broken}, headers=lab.headers)
    )
    await lab.ok(await lab.post(f"/api/flows/{flow_id}/publish"))
    suite = await lab.suite(demo, flow_id=flow_id)
    good = await lab.run(suite, flow_id, version=1)
    bad = await lab.run(suite, flow_id, version=2)
    assert good["passed"] is True and bad["passed"] is False
    assert bad["counts"] == {"pending": 0, "passed": 8, "failed": 2, "skipped": 0, "error": 0}
    failed = await lab.results(bad["id"], status="failed")
    assert [r["name"] for r in failed] == ["de: unknown order", "en: unknown order"]
    miss = failed[0]["failures"][0]
    assert miss["expectation"] == "reply to turn 1: contains 'finde den Auftrag 999999'"
    assert miss["expected"] == "finde den Auftrag 999999" and "Den Auftrag finde ich nicht." in miss["actual"]
    assert miss["turn"] == 1
    comparison = await lab.ok(await lab.get(f"/api/evaluations/runs/{good['id']}/compare/{bad['id']}"))
    assert comparison["broken"] == 2 and comparison["fixed"] == 0
    assert {c["name"]: (c["before"], c["after"]) for c in comparison["changed"]} == {
        "de: unknown order": ("passed", "failed"),
        "en: unknown order": ("passed", "failed"),
    }
