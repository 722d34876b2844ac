"""Who may do what, listings and pagination, and what outlives a deleted suite."""

from __future__ import annotations

from typing import Any

from parley.demo.flows import order_status_flow
from tests.conftest import auth
from tests.evaluations.conftest import Lab
from tests.organizations.test_router import ALICE, BOB, create_org


async def test_viewers_read_and_other_organizations_see_nothing(lab: Lab, demo: list[dict[str, Any]]) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    suite = await lab.suite(demo[:2], flow_id=flow_id)
    run = await lab.run(suite, flow_id)
    added = await lab.client.post(
        f"/api/organizations/{lab.org}/members",
        json={"subject": "bob", "role": "viewer"},
        headers=auth(ALICE),
    )
    assert added.status_code == 200, added.text
    viewer = auth(BOB, lab.org)
    assert (await lab.client.get(f"/api/evaluations/runs/{run['id']}", headers=viewer)).status_code == 200
    assert (await lab.client.get(f"/api/evaluations/suites/{suite}", headers=viewer)).status_code == 200
    denied = await lab.client.post(
        "/api/evaluations/runs", json={"suite": suite, "flow_id": flow_id}, headers=viewer
    )
    assert denied.status_code == 403
    assert (
        await lab.client.post(f"/api/evaluations/runs/{run['id']}/cancel", headers=viewer)
    ).status_code == 403
    assert (
        await lab.client.put(f"/api/evaluations/suites/{suite}", json={}, headers=viewer)
    ).status_code == 403
    other = str((await create_org(lab.client, name="Other shop"))["id"])
    stranger = auth(ALICE, other)
    assert (await lab.client.get(f"/api/evaluations/runs/{run['id']}", headers=stranger)).status_code == 404
    assert (
        await lab.client.get(f"/api/evaluations/runs/{run['id']}/results", headers=stranger)
    ).status_code == 404
    assert (await lab.client.get(f"/api/evaluations/suites/{suite}", headers=stranger)).status_code == 404
    listed = await lab.client.get("/api/evaluations/runs", headers=stranger)
    assert listed.json()["items"] == []
    body = {"suite": suite, "flow_id": flow_id}
    assert (await lab.client.post("/api/evaluations/runs", json=body, headers=stranger)).status_code == 404


async def test_listing_paging_and_a_deleted_suite(lab: Lab, demo: list[dict[str, Any]]) -> None:
    flow_id = await lab.flow(order_status_flow("de"))
    other_flow = await lab.flow(order_status_flow("en"), name="Order status")
    suite = await lab.suite(demo, flow_id=flow_id)
    first = await lab.run(suite, flow_id)
    second = await lab.run(suite, other_flow)
    assert second["passed"] is True  # the scenarios set their language, so they fit both agents
    mine = await lab.ok(await lab.get("/api/evaluations/runs", params={"flow_id": flow_id}))
    assert [r["id"] for r in mine["items"]] == [first["id"]]
    both = await lab.ok(await lab.get("/api/evaluations/runs", params={"suite": suite}))
    assert {r["id"] for r in both["items"]} == {first["id"], second["id"]}
    page = await lab.ok(await lab.get(f"/api/evaluations/runs/{first['id']}/results", params={"limit": 4}))
    rest = await lab.ok(
        await lab.get(
            f"/api/evaluations/runs/{first['id']}/results",
            params={"limit": 20, "cursor": page["next_cursor"]},
        )
    )
    positions = [r["position"] for r in page["items"] + rest["items"]]
    assert positions == list(range(10)) and rest["next_cursor"] is None
    bad = await lab.get(f"/api/evaluations/runs/{first['id']}/results", params={"cursor": "nonsense"})
    assert bad.status_code == 400
    assert (await lab.client.delete(f"/api/datasets/{suite}", headers=lab.headers)).status_code == 200
    assert await lab.ok(await lab.get("/api/evaluations/suites")) == []
    kept = await lab.ok(await lab.get(f"/api/evaluations/runs/{first['id']}"))
    assert kept["passed"] is True and kept["suite_name"] == "Regression"
