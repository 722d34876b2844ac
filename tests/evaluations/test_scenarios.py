"""Suites and their scenarios: validated on every write with clear 422s, imported from JSONL and CSV."""

from __future__ import annotations

from typing import Any

import orjson

from parley.demo.flows import order_status_flow
from tests.evaluations.conftest import Lab

KNOWN = {"name": "known", "turns": [{"say": "12"}], "expect": {"tool_calls": [{"tool": "order_lookup"}]}}


async def test_a_dataset_becomes_a_suite_and_stays_a_dataset(lab: Lab) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite([KNOWN], flow_id=flow_id)
    out = await lab.ok(await lab.get(f"/api/evaluations/suites/{suite}"))
    assert (out["flow_id"], out["scenario_count"], out["required_for_publish"]) == (flow_id, 1, False)
    dataset = await lab.ok(await lab.get(f"/api/datasets/{suite}"))
    assert dataset["item_count"] == 1  # the dataset API is unchanged
    listed = await lab.ok(await lab.get("/api/evaluations/suites", params={"name": "Regression"}))
    assert [s["dataset_id"] for s in listed] == [suite]
    gone = await lab.client.delete(f"/api/evaluations/suites/{suite}", headers=lab.headers)
    assert gone.status_code == 200
    assert (await lab.get(f"/api/evaluations/suites/{suite}")).status_code == 404
    assert (await lab.get(f"/api/datasets/{suite}")).status_code == 200


async def test_scenarios_are_validated_on_write(lab: Lab) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite([], flow_id=flow_id)
    url = f"/api/datasets/{suite}/items"
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"name": "x", "turns": [{"say": "1"}], "mocks": {"crm": {"status": "error"}}},
            "no tool named 'crm'",
        ),
        ({"name": "x", "turns": [{"say": "1"}], "expect": {"ends_at": "nowhere"}}, "no node 'nowhere'"),
        (
            {"name": "x", "turns": [{"say": "1", "expect": [{"matches": "(["}]}]},
            "not a valid regular expression",
        ),
        ({"name": "x", "turns": 5}, "turns: Input should be a valid list"),
        ({"name": "x", "turns": [{"say": "1"}], "expect": {"turns": "two"}}, "expect.turns"),
        ({"turns": [{"say": "1"}]}, "name: Field required"),
        ({"name": "x", "turns": [{"say": "1", "silence": True}]}, "either says something"),
        ({"name": "x", "persona": "impatient"}, "needs both persona and goal"),
        ({"name": "x", "turns": [{"say": "1"}], "surprise": 1}, "Extra inputs are not permitted"),
    ]
    for data, message in cases:
        response = await lab.post(url, {"data": data})
        assert response.status_code == 422, (data, response.text)
        assert message in str(response.json()["detail"]), (message, response.json()["detail"])
    batch = await lab.post(url, {"items": [{"data": KNOWN}, {"data": {"name": "y", "turns": [{}]}}]})
    assert batch.status_code == 422
    assert batch.json()["detail"][0]["msg"].startswith("1 of 2 item(s) are not valid scenarios: item 2:")
    assert (await lab.ok(await lab.get(f"/api/datasets/{suite}")))["item_count"] == 0  # all or nothing
    # A plain dataset still takes any JSON object.
    plain = await lab.ok(await lab.post("/api/datasets", {"name": "Plain"}))
    assert (
        await lab.post(f"/api/datasets/{plain['id']}/items", {"data": {"anything": 1}})
    ).status_code == 200
    refused = await lab.put(f"/api/evaluations/suites/{plain['id']}", {})
    assert refused.status_code == 422 and "1 of 1 item(s) are not valid scenarios" in str(
        refused.json()["detail"]
    )


async def test_import_jsonl_and_csv_into_a_suite(lab: Lab) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite([], flow_id=flow_id)
    url = f"/api/datasets/{suite}/import"
    jsonl = b"\n".join(orjson.dumps(s) for s in [KNOWN, {"name": "bad", "turns": [{"shout": "x"}]}])
    first = await lab.ok(await lab.post(url, files={"file": ("s.jsonl", jsonl, "application/x-ndjson")}))
    assert first["imported"] == 0 and first["errors"][0]["line"] == 2
    assert "turns.0" in first["errors"][0]["message"]
    lenient = await lab.ok(
        await lab.post(url, params={"skip_invalid": "true"}, files={"file": ("s.jsonl", jsonl, "text/plain")})
    )
    assert (lenient["imported"], lenient["skipped"]) == (1, 1)
    csv = (
        b"name;language;turns;expect_contains;expect_outcome;expect_signals;mocks\n"
        b"silent;en;<silence> | <silence> | <silence>;colleague;transferred;;\n"
        b'outage;de;12;nicht geklappt;transferred;tool_failure;"{""order_lookup"": {""status"": ""error""}}"\n'
    )
    imported = await lab.ok(await lab.post(url, files={"file": ("s.csv", csv, "text/csv")}))
    assert (imported["imported"], imported["errors"]) == (2, [])
    items = (await lab.ok(await lab.get(f"/api/datasets/{suite}/items")))["items"]
    outage = next(i["data"] for i in items if i["data"]["name"] == "outage")
    assert outage["turns"] == [{"say": "12"}]
    assert outage["mocks"] == {"order_lookup": {"status": "error"}}
    assert outage["expect"] == {
        "said": [{"contains": "nicht geklappt"}],
        "outcome": "transferred",
        "signals": ["tool_failure"],
    }
    run = await lab.run(suite, flow_id)
    assert (run["passed"], run["counts"]["passed"]) == (True, 3), await lab.results(run["id"])
    bad_csv = b"name;turns;expect_matches\nx;1;([\n"
    refused = await lab.ok(await lab.post(url, files={"file": ("b.csv", bad_csv, "text/csv")}))
    assert refused["imported"] == 0 and "not a valid regular expression" in refused["errors"][0]["message"]
