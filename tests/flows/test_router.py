from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import utcnow
from parley.knowledge.models import KnowledgeDocument
from tests.conftest import auth, make_token
from tests.flows.conftest import ORDER_KEY
from tests.flows.example import node, order_flow
from tests.organizations.test_router import ALICE, BOB, create_org

pytestmark = pytest.mark.usefixtures("order_tool")


async def create_flow(
    client: httpx.AsyncClient, headers: dict[str, str], definition: dict[str, Any] | None = None, **extra: Any
) -> httpx.Response:
    body = {"name": "Auftragsstatus", "definition": definition or order_flow(), **extra}
    return await client.post("/api/flows", json=body, headers=headers)


async def made_flow(client: httpx.AsyncClient, headers: dict[str, str], **extra: Any) -> dict[str, Any]:
    response = await create_flow(client, headers, **extra)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def add_document(db_session: AsyncSession, org: str, doc_id: str, title: str) -> None:
    db_session.add(
        KnowledgeDocument(
            id=doc_id,
            organization_id=org,
            title=title,
            status="ready",
            source="text",
            content_type="text/plain",
            size_bytes=10,
            created_at=utcnow(),
            updated_at=utcnow(),
        )
    )
    await db_session.flush()


async def test_crud_round_trip(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    flow = await made_flow(client, headers, description="Wo ist mein Auto?")
    assert flow["id"].startswith("flow_")
    assert flow["status"] == "draft"
    assert flow["has_unpublished_changes"] is True
    assert node(flow["definition"], "lookup")["tool"] == "order_lookup"

    got = (await client.get(f"/api/flows/{flow['id']}", headers=headers)).json()
    assert got == flow  # read as a plain row: the same answer as the create's

    other = await made_flow(client, headers, name="Rückruf")
    listed = (await client.get("/api/flows", params={"limit": 1}, headers=headers)).json()
    assert [f["id"] for f in listed["items"]] == [other["id"]]
    rest = (await client.get("/api/flows", params={"cursor": listed["next_cursor"]}, headers=headers)).json()
    assert [f["id"] for f in rest["items"]] == [flow["id"]]
    found = (await client.get("/api/flows", params={"q": "rückruf"}, headers=headers)).json()
    assert [f["id"] for f in found["items"]] == [other["id"]]

    patched = await client.patch(
        f"/api/flows/{flow['id']}", json={"name": "Status", "description": None}, headers=headers
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["name"], patched.json()["description"]) == ("Status", None)

    deleted = await client.delete(f"/api/flows/{flow['id']}", headers=headers)
    assert deleted.json() == {"id": flow["id"], "deleted": True}
    assert (await client.get(f"/api/flows/{flow['id']}", headers=headers)).status_code == 404


async def test_create_accepts_text_plain_and_multipart(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    import orjson

    text = await client.post(
        "/api/flows",
        content=orjson.dumps({"name": "T", "definition": order_flow()}),
        headers={**headers, "Content-Type": "text/plain"},
    )
    assert text.status_code == 200, text.text
    form = await client.post(
        "/api/flows",
        files={"name": (None, "M"), "definition": (None, orjson.dumps(order_flow()).decode())},
        headers=headers,
    )
    assert form.status_code == 200, form.text


def _set(node_id: str, field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        node(d, node_id)[field] = value

    return change


def _add(extra: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["nodes"].append(extra)


def _start(d: dict[str, Any]) -> None:
    d["start_node"] = "nowhere"


def _duplicate(d: dict[str, Any]) -> None:
    d["nodes"].append({**node(d, "goodbye"), "text": "again"})


def _tight_loop(d: dict[str, Any]) -> None:
    node(d, "greet")["next"] = "spin_a"
    d["nodes"] += [
        {"id": "spin_a", "type": "say", "text": "a", "next": "spin_b"},
        {"id": "spin_b", "type": "set", "assignments": {"attempts": "attempts + 1"}, "next": "spin_a"},
    ]


def _turn_taking(**settings: Any) -> Callable[[dict[str, Any]], None]:
    def change(definition: dict[str, Any]) -> None:
        definition.setdefault("voice", {})["turn_taking"] = settings

    return change


INVALID = [
    (
        "dangling target",
        _set("ask_order", "next", "nowhere"),
        ["nodes", "ask_order", "next"],
        "does not exist",
    ),
    (
        "dangling on_error",
        _set("lookup", "on_error", "gone"),
        ["nodes", "lookup", "on_error"],
        "does not exist",
    ),
    ("missing start node", _start, ["start_node"], "is not one of the nodes"),
    ("duplicate ids", _duplicate, ["nodes", "goodbye", "id"], "more than once"),
    (
        "unreachable node",
        _add({"id": "orphan", "type": "say", "text": "Hallo", "next": "goodbye"}),
        ["nodes", "orphan", "id"],
        "cannot be reached",
    ),
    ("no next", _set("greet", "next", None), ["nodes", "greet", "next"], "does not say where to continue"),
    ("unknown tool", _set("lookup", "tool", "crm_lookup"), ["nodes", "lookup", "tool"], "does not exist"),
    (
        "bad expression",
        _set("found", "conditions", [{"when": "order.success and", "next": "say_status"}]),
        ["nodes", "found", "conditions", 0, "when"],
        "does not parse",
    ),
    (
        "unknown variable",
        _set("found", "conditions", [{"when": "ordr.success", "next": "say_status"}]),
        ["nodes", "found", "conditions", 0, "when"],
        "'ordr' is not defined",
    ),
    (
        "expression injection",
        _set("count_attempt", "assignments", {"attempts": "__import__('os').system('id')"}),
        ["nodes", "count_attempt", "assignments", "attempts"],
        "private name '__import__'",
    ),
    (
        "dunder attribute",
        _set("found", "conditions", [{"when": "order.__class__", "next": "say_status"}]),
        ["nodes", "found", "conditions", 0, "when"],
        "private attribute",
    ),
    (
        "bad template",
        _set("greet", "text", "Hallo {{ shop_name "),
        ["nodes", "greet", "text"],
        "syntax error",
    ),
    (
        "sandbox escape template",
        _set("greet", "text", "{{ ''.__class__.__mro__ }}"),
        ["nodes", "greet", "text"],
        "private attribute",
    ),
    (
        "unknown template variable",
        _set("greet", "text", "{{ shopname }}"),
        ["nodes", "greet", "text"],
        "shopname",
    ),
    ("loop that never waits", _tight_loop, ["nodes", "spin_a", "next"], "never waits for the caller"),
    ("bad regex", _set("ask_order", "kind", "regex"), ["nodes", "ask_order", "pattern"], "needs a pattern"),
    (
        "choice without choices",
        _set("ask_order", "kind", "choice"),
        ["nodes", "ask_order", "choices"],
        "choices",
    ),
    (
        "short hangover longer than the node's",
        _set("ask_order", "short_hangover_ms", 900),
        ["nodes", "ask_order", "short_hangover_ms"],
        "longer than the hangover",
    ),
    (
        "short hangover longer than the flow's",
        _turn_taking(hangover_ms=400, short_hangover_ms=500),
        ["voice", "turn_taking", "short_hangover_ms"],
        "longer than the hangover",
    ),
]


@pytest.mark.parametrize(("label", "change", "loc", "message"), INVALID, ids=[i[0] for i in INVALID])
async def test_invalid_definitions_are_422_naming_node_and_field(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    label: str,
    change: Callable[[dict[str, Any]], None],
    loc: list[Any],
    message: str,
) -> None:
    definition = order_flow()
    change(definition)
    response = await create_flow(client, headers, definition)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    matching = [e for e in errors if e["loc"] == ["body", "definition", *loc]]
    assert matching, errors
    assert any(message in e["msg"] for e in matching), matching

    report = await client.post("/api/flows/validate", json={"definition": definition}, headers=headers)
    assert report.status_code == 200
    assert report.json()["valid"] is False
    node_id = loc[1] if loc[0] == "nodes" else None
    assert any(e["node"] == node_id and message in e["message"] for e in report.json()["errors"])

    flow = await made_flow(client, headers)
    patched = await client.patch(f"/api/flows/{flow['id']}", json={"definition": definition}, headers=headers)
    assert patched.status_code == 422
    unchanged = (await client.get(f"/api/flows/{flow['id']}", headers=headers)).json()
    assert unchanged["definition"] == flow["definition"]


async def test_bad_regex_pattern_is_reported(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    definition = order_flow()
    node(definition, "ask_order").update(kind="regex", pattern="([0-9]+")
    response = await create_flow(client, headers, definition)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-2:] == ["ask_order", "pattern"]
    assert "does not compile" in response.json()["detail"][0]["msg"]


async def test_validate_reports_structural_errors_by_node(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    definition = order_flow()
    node(definition, "handoff")["phone_number"] = "030 123"
    node(definition, "greet")["type"] = "shout"
    report = (
        await client.post("/api/flows/validate", json={"definition": definition}, headers=headers)
    ).json()
    assert report["valid"] is False
    assert {e["node"] for e in report["errors"]} == {"handoff", "greet"}
    assert any(e["node"] == "handoff" and e["field"] == "phone_number" for e in report["errors"])

    good = (
        await client.post("/api/flows/validate", json={"definition": order_flow()}, headers=headers)
    ).json()
    assert good == {"valid": True, "errors": []}


async def test_publish_freezes_numbered_immutable_versions(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    flow = await made_flow(client, headers)
    url = f"/api/flows/{flow['id']}"
    first = await client.post(f"{url}/publish", headers=headers)
    assert first.status_code == 200, first.text
    assert first.json()["version"] == 1
    assert first.json()["definition"] == flow["definition"]

    again = await client.post(f"{url}/publish", headers=headers)
    assert again.status_code == 409
    assert "has not changed since version 1" in again.json()["detail"]

    changed = order_flow()
    node(changed, "greet")["text"] = "Moin!"
    assert (await client.patch(url, json={"definition": changed}, headers=headers)).status_code == 200
    state = (await client.get(url, headers=headers)).json()
    assert (state["status"], state["latest_version"], state["has_unpublished_changes"]) == (
        "published",
        1,
        True,
    )
    second = await client.post(f"{url}/publish", headers=headers)
    assert second.json()["version"] == 2

    v1 = (await client.get(f"{url}/versions/1", headers=headers)).json()
    assert node(v1["definition"], "greet")["text"] == node(order_flow(), "greet")["text"]
    v2 = (await client.get(f"{url}/versions/2", headers=headers)).json()
    assert node(v2["definition"], "greet")["text"] == "Moin!"
    assert (await client.get(f"{url}/versions/3", headers=headers)).status_code == 404

    page = (await client.get(f"{url}/versions", params={"limit": 1}, headers=headers)).json()
    assert [v["version"] for v in page["items"]] == [2]
    assert "definition" not in page["items"][0]
    older = (
        await client.get(f"{url}/versions", params={"cursor": page["next_cursor"]}, headers=headers)
    ).json()
    assert [v["version"] for v in older["items"]] == [1]

    # Versions have no write routes at all.
    assert (await client.patch(f"{url}/versions/1", json={}, headers=headers)).status_code == 405
    assert (await client.delete(f"{url}/versions/1", headers=headers)).status_code == 405

    published = (await client.get("/api/flows", params={"status": "published"}, headers=headers)).json()
    drafts = (await client.get("/api/flows", params={"status": "draft"}, headers=headers)).json()
    assert flow["id"] in [f["id"] for f in published["items"]]
    assert flow["id"] not in [f["id"] for f in drafts["items"]]


async def test_an_invalid_draft_cannot_be_published(
    client: httpx.AsyncClient, headers: dict[str, str], org: str, db_session: AsyncSession
) -> None:
    await add_document(db_session, org, "doc_gone", "Öffnungszeiten")
    definition = order_flow()
    node(definition, "say_not_found")["next"] = "faq"
    definition["nodes"].append(
        {"id": "faq", "type": "knowledge", "document_ids": ["doc_gone"], "next": "ask_order"}
    )
    flow = await made_flow(client, headers, definition=definition)
    await db_session.execute(delete(KnowledgeDocument).where(KnowledgeDocument.id == "doc_gone"))
    await db_session.flush()

    report = (await client.post(f"/api/flows/{flow['id']}/validate", headers=headers)).json()
    assert report["valid"] is False
    assert report["errors"][0]["node"] == "faq"
    assert report["errors"][0]["field"] == "document_ids.0"
    refused = await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)
    assert refused.status_code == 409
    assert "not valid" in refused.json()["detail"] and "faq" in refused.json()["detail"]


async def test_full_view_resolves_nodes_edges_tools_and_documents(
    client: httpx.AsyncClient, headers: dict[str, str], org: str, db_session: AsyncSession
) -> None:
    await add_document(db_session, org, "doc_hours", "Öffnungszeiten")
    definition = order_flow()
    node(definition, "say_not_found")["next"] = "assistant"
    definition["nodes"] += [
        {
            "id": "assistant",
            "type": "llm",
            "system_prompt": "Hilf bei Fragen zu {{ shop_name }}.",
            "tools": ["order_lookup"],
            "transitions": [{"name": "wants_status", "description": "Status", "next": "ask_order"}],
            "next": "faq",
        },
        {"id": "faq", "type": "knowledge", "document_ids": ["doc_hours"], "next": "goodbye"},
    ]
    flow = await made_flow(client, headers, definition=definition)
    await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)

    response = await client.get(f"/api/flows/{flow['id']}/full", headers=headers)
    assert response.status_code == 200, response.text
    full = response.json()
    assert ORDER_KEY not in response.text
    assert [t["name"] for t in full["tools"]] == ["order_lookup"]
    assert full["tools"][0]["secrets"] == {"api_key": "••••9876"}
    assert full["knowledge_documents"] == [{"id": "doc_hours", "title": "Öffnungszeiten", "status": "ready"}]
    assert full["version"]["published_versions"] == 1
    assert full["version"]["latest_version"] == 1
    assert full["version"]["has_unpublished_changes"] is False
    assert full["validation"] == {"valid": True, "errors": []}
    assert full["missing_tools"] == []

    edges = {(e["from"], e["to"], e["kind"]) for e in full["edges"]}
    assert ("greet", "ask_order", "next") in edges
    assert ("found", "say_status", "condition") in edges
    assert ("found", "not_found", "next") in edges
    assert ("lookup", "lookup_failed", "on_error") in edges
    assert ("ask_order", "handoff", "on_failure") in edges
    assert ("assistant", "ask_order", "transition") in edges
    condition = next(e for e in full["edges"] if e["kind"] == "condition" and e["from"] == "found")
    assert condition["label"] == "order.success"

    nodes = {n["id"]: n for n in full["nodes"]}
    assert nodes["greet"]["is_start"] is True
    assert all(n["reachable"] for n in nodes.values())
    assert nodes["lookup"]["config"]["result_variable"] == "order"


async def test_export_import_round_trip(
    client: httpx.AsyncClient, headers: dict[str, str], order_tool: Any
) -> None:
    definition = order_flow()
    node(definition, "lookup")["tool"] = order_tool["id"]  # by id here; the export uses names
    flow = await made_flow(client, headers, definition=definition)
    response = await client.get(f"/api/flows/{flow['id']}/export", headers=headers)
    assert response.status_code == 200
    assert ORDER_KEY not in response.text
    exported = response.json()
    assert exported["format"] == "parley.flow/v1"
    assert node(exported["definition"], "lookup")["tool"] == "order_lookup"
    assert exported["tools"] == [
        {
            "name": "order_lookup",
            "description": None,
            "type": "order_lookup",
            "config": order_tool["config"],
            "secret_names": ["api_key"],
        }
    ]

    # Another organization: the tool is created, without its secret.
    bob_org = await create_org(client, BOB, name="Werkstatt Bob")
    bob = auth(BOB, str(bob_org["id"]))
    imported = await client.post("/api/flows/import", json=exported, headers=bob)
    assert imported.status_code == 200, imported.text
    result = imported.json()
    assert result["created_tools"] == ["order_lookup"]
    assert result["missing_secrets"] == {"order_lookup": ["api_key"]}
    assert result["flow"]["definition"] == exported["definition"]
    tools = (await client.get("/api/tools", headers=bob)).json()["items"]
    assert [(t["name"], t["secrets"]) for t in tools] == [("order_lookup", {})]

    # The same organization: the existing tool is reused.
    again = (await client.post("/api/flows/import", json=exported, headers=headers)).json()
    assert again["reused_tools"] == ["order_lookup"]
    assert again["created_tools"] == []

    clash = {
        **exported,
        "tools": [{**exported["tools"][0], "type": "http", "config": {"url": "https://x.example"}}],
    }
    assert (await client.post("/api/flows/import", json=clash, headers=headers)).status_code == 409


async def test_a_tool_used_by_a_flow_cannot_be_deleted_or_renamed(
    client: httpx.AsyncClient, headers: dict[str, str], order_tool: Any
) -> None:
    await made_flow(client, headers)
    tool_url = f"/api/tools/{order_tool['id']}"
    assert (await client.delete(tool_url, headers=headers)).status_code == 409
    assert (await client.patch(tool_url, json={"name": "other"}, headers=headers)).status_code == 409


async def test_another_organizations_flow_is_404(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    flow = await made_flow(client, headers)
    bob_org = await create_org(client, BOB, name="Werkstatt Bob")
    bob = auth(BOB, str(bob_org["id"]))
    url = f"/api/flows/{flow['id']}"
    for method, path in [
        ("GET", ""),
        ("GET", "/full"),
        ("GET", "/export"),
        ("GET", "/versions"),
        ("POST", "/validate"),
        ("POST", "/publish"),
        ("DELETE", ""),
    ]:
        response = await client.request(method, url + path, headers=bob)
        assert response.status_code == 404, (method, path, response.text)
    assert (await client.patch(url, json={"name": "x"}, headers=bob)).status_code == 404
    assert (await client.get("/api/flows", headers=bob)).json()["items"] == []


async def test_viewers_read_but_cannot_write(
    client: httpx.AsyncClient, headers: dict[str, str], org: str
) -> None:
    flow = await made_flow(client, headers)
    added = await client.post(
        f"/api/organizations/{org}/members", json={"subject": "victor", "role": "viewer"}, headers=auth(ALICE)
    )
    assert added.status_code == 200, added.text
    viewer = auth(make_token("victor"), org)
    url = f"/api/flows/{flow['id']}"
    assert (await client.get(url, headers=viewer)).status_code == 200
    assert (await client.get(f"{url}/full", headers=viewer)).status_code == 200
    assert (await create_flow(client, viewer)).status_code == 403
    assert (await client.patch(url, json={"name": "x"}, headers=viewer)).status_code == 403
    assert (await client.post(f"{url}/publish", headers=viewer)).status_code == 403
    assert (await client.delete(url, headers=viewer)).status_code == 403
    exported = (await client.get(f"{url}/export", headers=viewer)).json()
    assert (await client.post("/api/flows/import", json=exported, headers=viewer)).status_code == 403


def test_the_documented_example_is_the_tested_one() -> None:
    import json
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "flows.md").read_text()
    block = text.split("## Complete example", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(block) == order_flow()
