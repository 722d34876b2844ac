"""Simulated callers against the local OpenAI-compatible server, which plays the caller and the judge."""

from __future__ import annotations

from typing import Any

from parley.demo.flows import order_status_flow
from tests.evaluations.conftest import Lab
from tests.stubs.openai import StubState

PERSONA = {
    "name": "impatient caller",
    "language": "en",
    "persona": "An impatient customer whose order number is 12.",
    "goal": "Learn the status of the repair, then hang up.",
    "max_turns": 6,
    "rubric": ["The agent says when the car is 'ready'.", "The agent says 'goodbye'."],
    "expect": {"tool_calls": [{"tool": "order_lookup", "arguments": {"order_id": "12"}}]},
}


async def _provider(lab: Lab, llm_stub: tuple[str, StubState]) -> None:
    body = {"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": "stub-model"}
    assert (await lab.put("/api/providers/openai/config", body)).status_code == 200


async def test_a_simulated_caller_plays_until_the_end_and_the_rubric_is_judged(
    lab: Lab, llm_stub: tuple[str, StubState]
) -> None:
    await _provider(lab, llm_stub)
    flow_id = await lab.flow(order_status_flow("de"))
    failing: dict[str, Any] = PERSONA | {"name": "strict judge", "rubric": ["The agent offers a 'discount'."]}
    suite = await lab.suite([PERSONA, failing], flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    passed, failed = await lab.results(run["id"])
    assert passed["status"] == "passed", passed
    callers = [t["caller"] for t in passed["turns"][1:]]
    assert callers == ["My order number is 12.", "no thanks", "no thanks"]  # no cost, no callback
    assert passed["outcome"] == "completed" and passed["end_reason"] == "flow_completed"
    assert [v["passed"] for v in passed["rubric"]] == [True, True]
    assert passed["rubric"][0]["reason"] == "Everything asked for was said."
    assert failed["status"] == "failed"
    assert failed["failures"] == [
        {
            "expectation": "rubric: The agent offers a 'discount'.",
            "expected": "met",
            "actual": "'discount' was not said.",
            "turn": None,
        }
    ]
    judged = [
        r for r in llm_stub[1].requests if "You judge a phone conversation" in r["messages"][0]["content"]
    ]
    assert judged and "agent: Hello, this is the order service" in judged[-1]["messages"][1]["content"]


async def test_without_a_provider_simulated_callers_are_skipped_never_passed(lab: Lab) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite([PERSONA], flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    [result] = await lab.results(run["id"])
    assert result["status"] == "skipped" and "needs an LLM provider" in result["reason"]
    assert run["passed"] is False and run["counts"]["skipped"] == 1


async def test_a_caller_model_that_fails_is_an_error(lab: Lab, llm_stub: tuple[str, StubState]) -> None:
    body = {"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": "error-500"}
    assert (await lab.put("/api/providers/openai/config", body)).status_code == 200
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite([PERSONA], flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    [result] = await lab.results(run["id"])
    assert result["status"] == "error" and result["reason"].startswith("The LLM playing the caller failed:")
