"""Every scenario accounted for: a cancel halfway, a flow deleted mid-run, a failing LLM; the publish
gate; bad requests."""

from __future__ import annotations

from typing import Any

from parley.demo.flows import order_status_flow
from parley.evaluations import tasks
from parley.kit.jobs import JobContext
from tests.evaluations.conftest import Lab
from tests.stubs.openai import StubState


async def _first_chunk_only(lab: Lab, suite: str, flow_id: str) -> dict[str, Any]:
    """Start a run and work its first chunk (of four) by hand; the other chunks wait in the queue."""
    run = await lab.ok(await lab.post("/api/evaluations/runs", {"suite": suite, "flow_id": flow_id}))
    context = JobContext(db=lab.app.state.db, state=lab.app.state)
    await tasks.run_chunk(context, {"run_id": run["id"], "chunk": 0})
    progress = await lab.ok(await lab.get(f"/api/evaluations/runs/{run['id']}"))
    assert (progress["status"], progress["done"], progress["total"]) == ("running", 3, 10)
    return dict(run)


async def test_cancel_halfway_skips_the_rest(lab: Lab, demo: list[dict[str, Any]]) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite(demo, flow_id=flow_id)
    run = await _first_chunk_only(lab, suite, flow_id)
    cancelled = await lab.ok(await lab.post(f"/api/evaluations/runs/{run['id']}/cancel"))
    assert (cancelled["status"], cancelled["passed"]) == ("cancelled", False)
    assert cancelled["counts"] == {"pending": 0, "passed": 3, "failed": 0, "skipped": 7, "error": 0}
    await lab.drain()  # the queued chunks find the run cancelled and leave it alone
    after = await lab.ok(await lab.get(f"/api/evaluations/runs/{run['id']}"))
    assert after["counts"] == cancelled["counts"] and after["status"] == "cancelled"
    skipped = await lab.results(run["id"], status="skipped")
    assert {r["reason"] for r in skipped} == {"The run was cancelled before this scenario ran."}
    again = await lab.post(f"/api/evaluations/runs/{run['id']}/cancel")
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


async def test_a_flow_deleted_mid_run_ends_every_scenario(lab: Lab, demo: list[dict[str, Any]]) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite(demo, flow_id=flow_id)
    run = await _first_chunk_only(lab, suite, flow_id)
    assert (await lab.client.delete(f"/api/flows/{flow_id}", headers=lab.headers)).status_code == 200
    await lab.drain()
    done = await lab.ok(await lab.get(f"/api/evaluations/runs/{run['id']}"))
    assert (done["status"], done["passed"]) == ("completed", False)
    assert done["counts"] == {"pending": 0, "passed": 3, "failed": 0, "skipped": 0, "error": 7}
    errors = await lab.results(run["id"], status="error")
    assert {r["reason"] for r in errors} == {"The flow was deleted during the run."}


LLM_FLOW = {
    "language": "en",
    "start_node": "chat",
    "nodes": [
        {
            "id": "chat",
            "type": "llm",
            "system_prompt": "Answer briefly.",
            "tools": ["order_lookup"],
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Goodbye."},
    ],
}


async def test_a_failing_llm_is_an_error_with_its_reason(lab: Lab, llm_stub: tuple[str, StubState]) -> None:
    configured = await lab.put(
        "/api/providers/openai/config",
        {"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": "error-500"},
    )
    assert configured.status_code == 200, configured.text
    flow_id = await lab.flow(LLM_FLOW, name="LLM agent")
    suite = await lab.suite([{"name": "asks", "turns": [{"say": "Where is my order 7?"}]}], flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    [result] = await lab.results(run["id"])
    assert result["status"] == "error" and result["reason"].startswith("The flow's LLM failed:")
    assert run["status"] == "completed" and run["passed"] is False


async def test_the_publish_gate(lab: Lab, demo: list[dict[str, Any]]) -> None:
    flow_id = await lab.flow(order_status_flow("de"), publish=True)
    suite = await lab.suite(demo, flow_id=flow_id, required_for_publish=True)
    broken = order_status_flow("de")
    for node in broken["nodes"]:
        if node["id"] == "lookup_failed":  # a regression: an outage no longer raises its signal
            node.update(type="set", assignments={"attempts": "attempts"})
            node.pop("signal_type"), node.pop("severity"), node.pop("details")
    patched = await lab.client.patch(
        f"/api/flows/{flow_id}", json={"definition": broken}, headers=lab.headers
    )
    assert patched.status_code == 200, patched.text
    untested = await lab.post(f"/api/flows/{flow_id}/publish")
    assert untested.status_code == 409 and untested.json()["code"] == "evaluation_gate"
    assert "has not run on it yet" in untested.json()["detail"]
    failed = await lab.run(suite, flow_id)
    assert failed["passed"] is False
    refused = await lab.post(f"/api/flows/{flow_id}/publish")
    assert refused.status_code == 409
    assert refused.json()["detail"].endswith(
        "2 scenario(s) did not pass: 'de: connector outage', 'en: connector outage'."
    )
    repaired = order_status_flow("de") | {"prompt": "Du bist der Assistent von {{ shop_name }}."}
    fixed = await lab.client.patch(
        f"/api/flows/{flow_id}", json={"definition": repaired}, headers=lab.headers
    )
    assert fixed.status_code == 200
    assert (await lab.run(suite, flow_id))["passed"] is True
    published = await lab.ok(await lab.post(f"/api/flows/{flow_id}/publish"))
    assert published["version"] == 2


async def test_bad_run_requests(lab: Lab) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    plain = await lab.ok(await lab.post("/api/datasets", {"name": "Plain"}))
    empty = await lab.suite([], flow_id=flow_id, name="Empty")
    cases = [
        ({"suite": "nope", "flow_id": flow_id}, 404, "No dataset with the id or name 'nope'"),
        ({"suite": plain["id"], "flow_id": flow_id}, 422, "is not a test suite"),
        ({"suite": "Empty", "flow_id": flow_id}, 422, "has no scenarios yet"),
        ({"suite": empty, "flow_id": "flow_missing"}, 404, "Flow"),
        ({"suite": empty, "flow_id": flow_id, "version": 3}, 404, "no published version 3"),
        ({"suite": empty, "flow_id": flow_id, "mode": "phone"}, 422, "Input should be 'text' or 'voice'"),
    ]
    for body, status, message in cases:
        response = await lab.post("/api/evaluations/runs", body)
        assert response.status_code == status, (body, response.text)
        assert message in str(response.json()["detail"]), (body, response.text)
    assert (await lab.get("/api/evaluations/runs/evr_nope")).status_code == 404
    too_many = await lab.post(
        f"/api/datasets/{empty}/items", {"items": [{"data": {"name": f"s{i}"}} for i in range(1000)]}
    )
    assert too_many.status_code == 200
    over = await lab.post(f"/api/datasets/{empty}/items", {"data": {"name": "one more"}})
    assert over.status_code == 422 and "at most 1000 scenarios" in str(over.json()["detail"])
