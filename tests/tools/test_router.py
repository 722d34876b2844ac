from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.crypto import SecretBox, SecretDecryptionError
from parley.tools.models import Tool
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org
from tests.tools.conftest import ClientFactory

TOKEN = "sk_upstream_secret_4321"


def http_tool(url: str, **config: Any) -> dict[str, Any]:
    return {
        "name": "order_api",
        "type": "http",
        "description": "Order API",
        "config": {
            "method": "GET",
            "url": url,
            "headers": {"Authorization": "Bearer {{ secrets.token }}"},
            "query": {"lang": "{{ language }}", "key": "{{ secrets.token }}"},
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "pattern": "^[0-9]+$"},
                    "language": {"type": "string"},
                },
                "required": ["order_id"],
            },
            "timeout_seconds": 5,
            **config,
        },
        "secrets": {"token": TOKEN},
    }


async def make_tool(
    client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]
) -> dict[str, Any]:
    response = await client.post("/api/tools", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def run(
    client: httpx.AsyncClient, headers: dict[str, str], tool_id: str, **arguments: Any
) -> httpx.Response:
    return await client.post(f"/api/tools/{tool_id}/test", json={"arguments": arguments}, headers=headers)


async def test_crud_and_secrets_are_never_returned(
    client: httpx.AsyncClient, headers: dict[str, str], db_session: AsyncSession, settings: Settings
) -> None:
    response = await client.post(
        "/api/tools", json=http_tool("https://api.example.com/orders"), headers=headers
    )
    assert response.status_code == 200, response.text
    assert TOKEN not in response.text
    tool = response.json()
    assert tool["id"].startswith("tool_")
    assert tool["secrets"] == {"token": "••••4321"}
    assert tool["parameters"]["required"] == ["order_id"]

    for url in (f"/api/tools/{tool['id']}", "/api/tools", "/api/tools?type=http&q=order"):
        read = await client.get(url, headers=headers)
        assert read.status_code == 200
        assert TOKEN not in read.text
    # GET by id reads a plain row (no ORM object): the same answer as the create's
    assert (await client.get(f"/api/tools/{tool['id']}", headers=headers)).json() == tool
    assert (await client.get("/api/tools?type=transfer", headers=headers)).json()["items"] == []

    # Encrypted at rest, bound to the row and field.
    row = await db_session.scalar(select(Tool).where(Tool.id == tool["id"]))
    assert row is not None
    sealed = row.secrets["token"]
    assert TOKEN not in sealed and sealed.startswith("v1:")
    box = SecretBox(settings.secret_key_bytes())
    assert box.decrypt(sealed, bound_to=f"tools:{tool['id']}:secrets.token") == TOKEN
    with pytest.raises(SecretDecryptionError):
        box.decrypt(sealed, bound_to="tools:tool_other:secrets.token")

    patched = await client.patch(
        f"/api/tools/{tool['id']}",
        json={"secrets": {"token": None, "extra": "another-secret-value"}, "description": "Neu"},
        headers=headers,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["secrets"] == {"extra": "••••alue"}
    assert patched.json()["description"] == "Neu"

    clash = await client.post("/api/tools", json=http_tool("https://api.example.com/x"), headers=headers)
    assert clash.status_code == 409

    deleted = await client.delete(f"/api/tools/{tool['id']}", headers=headers)
    assert deleted.json() == {"id": tool["id"], "deleted": True}
    assert (await client.get(f"/api/tools/{tool['id']}", headers=headers)).status_code == 404


@pytest.mark.parametrize(
    ("config", "loc"),
    [
        ({"url": "ftp://example.com/x"}, ["body", "config", "url"]),
        ({"url": "https://example.com/{{ x "}, ["body", "config", "url"]),
        ({"url": "https://example.com", "timeout_seconds": 31}, ["body", "config", "timeout_seconds"]),
        ({"url": "https://example.com", "parameters": {"type": "bogus"}}, ["body", "config", "parameters"]),
        ({"url": "https://example.com", "parameters": {"type": "string"}}, ["body", "config", "parameters"]),
        ({"url": "https://example.com", "surprise": 1}, ["body", "config", "surprise"]),
    ],
)
async def test_invalid_config_is_422(
    client: httpx.AsyncClient, headers: dict[str, str], config: dict[str, Any], loc: list[str]
) -> None:
    response = await client.post(
        "/api/tools", json={"name": "bad", "type": "http", "config": config}, headers=headers
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


async def test_order_lookup_needs_its_api_key(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post(
        "/api/tools", json={"name": "orders", "type": "order_lookup"}, headers=headers
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "secrets", "api_key"]


async def test_http_tool_calls_the_upstream_with_rendered_templates(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    tool = await make_tool(
        allow_client,
        headers,
        http_tool(
            f"{stub_url}/echo/orders/{{{{ order_id }}}}",
            method="POST",
            body={"order": "{{ order_id }}", "note": "Auftrag {{ order_id }}", "n": 1},
        ),
    )
    response = await run(allow_client, headers, tool["id"], order_id="4711", language="de")
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["status"] == "ok", report
    assert report["http_status"] == 200
    assert report["latency_ms"] > 0
    echoed = report["result"]
    assert echoed["method"] == "POST"
    assert echoed["path"] == "/echo/orders/4711"
    assert echoed["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert echoed["query"] == {"lang": "de", "key": TOKEN}
    assert echoed["json"] == {"order": "4711", "note": "Auftrag 4711", "n": 1}


async def test_arguments_are_validated_and_url_encoded(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    body = http_tool(f"{stub_url}/echo/{{{{ name }}}}")
    body["config"]["parameters"] = {"type": "object", "properties": {"name": {"type": "string"}}}
    tool = await make_tool(allow_client, headers, body)
    report = (await run(allow_client, headers, tool["id"], name="../../admin?x=1")).json()
    assert report["result"]["raw_path"] == "/echo/%2E%2E%2F%2E%2E%2Fadmin%3Fx%3D1"

    strict = await make_tool(allow_client, headers, {**http_tool(f"{stub_url}/echo/x"), "name": "strict"})
    missing = await run(allow_client, headers, strict["id"])
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "arguments"]
    wrong = await run(allow_client, headers, strict["id"], order_id="12a")
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["body", "arguments", "order_id"]


async def test_response_mapping_extracts_values(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    tool = await make_tool(
        allow_client,
        headers,
        http_tool(
            f"{stub_url}/echo/x",
            response_mapping={"status": "/order/status", "price": "order.lines.0.price", "none": "/nope"},
        ),
    )
    report = (await run(allow_client, headers, tool["id"], order_id="1")).json()
    assert report["result"] == {"status": "in Arbeit", "price": 12.5, "none": None}


async def test_upstream_errors_timeouts_and_size_are_reported(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    failing = await make_tool(
        allow_client, headers, {**http_tool(f"{stub_url}/status/500"), "name": "failing"}
    )
    report = (await run(allow_client, headers, failing["id"], order_id="1")).json()
    assert (report["status"], report["http_status"]) == ("error", 500)
    assert report["result"] == {"error": "upstream broke"}
    assert "HTTP 500" in report["error"]

    slow = await make_tool(
        allow_client, headers, {**http_tool(f"{stub_url}/slow", timeout_seconds=1), "name": "slow"}
    )
    report = (await run(allow_client, headers, slow["id"], order_id="1")).json()
    assert report["status"] == "timeout"
    assert "did not answer within 1 s" in report["error"]

    big = await make_tool(allow_client, headers, {**http_tool(f"{stub_url}/big"), "name": "big"})
    report = (await run(allow_client, headers, big["id"], order_id="1")).json()
    assert report["status"] == "ok"
    assert report["truncated"] is True
    assert len(report["result"].encode()) <= 10 * 1024

    huge = await make_tool(allow_client, headers, {**http_tool(f"{stub_url}/huge"), "name": "huge"})
    report = (await run(allow_client, headers, huge["id"], order_id="1")).json()
    assert report["status"] == "error"
    assert "larger than" in report["error"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/echo/x",
        "http://localhost:{port}/echo/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://0x7f000001:{port}/echo/x",
        "http://[::ffff:127.0.0.1]:{port}/echo/x",
        "http://10.0.0.1/",
    ],
)
async def test_private_destinations_are_refused(
    client: httpx.AsyncClient, headers: dict[str, str], stub_url: str, url: str
) -> None:
    port = stub_url.rsplit(":", 1)[1]
    tool = await make_tool(client, headers, http_tool(url.format(port=port)))
    response = await run(client, headers, tool["id"], order_id="1")
    assert response.status_code == 200
    report = response.json()
    assert report["status"] == "error"
    assert "non-public address" in report["error"]
    assert report["result"] is None


async def test_a_redirect_to_loopback_is_refused(
    make_client: ClientFactory, headers: dict[str, str], stub_url: str
) -> None:
    # "localhost" is allowed by name; the redirect's target, 127.0.0.1, is not.
    client = make_client(outbound_allowlist=["localhost"])
    start = stub_url.replace("127.0.0.1", "localhost")
    tool = await make_tool(client, headers, http_tool(f"{start}/redirect?to={stub_url}/echo/x"))
    report = (await run(client, headers, tool["id"], order_id="1")).json()
    assert report["status"] == "error"
    assert "non-public address" in report["error"]


async def test_a_redirect_to_another_origin_leaves_the_secret_headers_behind(
    make_client: ClientFactory, headers: dict[str, str], stub_url: str
) -> None:
    # A header made from a secret is a credential of its origin: a redirect to another origin (here
    # 127.0.0.1 → localhost, both allowed) drops it, as it drops Authorization; other headers follow.
    client = make_client(outbound_allowlist=["127.0.0.1", "localhost"])
    elsewhere = stub_url.replace("127.0.0.1", "localhost")
    body = http_tool(f"{stub_url}/redirect?to={elsewhere}/echo/x")
    body["config"]["headers"] = {
        "X-API-Key": "{{ secrets.token }}",
        "X-Signed": "v1={% if secrets.token %}yes{% endif %}",
        "X-Plain": "hello",
    }
    tool = await make_tool(client, headers, body)
    report = (await run(client, headers, tool["id"], order_id="1")).json()
    assert report["status"] == "ok", report
    seen = report["result"]["headers"]
    assert seen["x-plain"] == "hello"
    assert "x-api-key" not in seen and "x-signed" not in seen and "authorization" not in seen

    same = http_tool(f"{stub_url}/redirect?to=/echo/x")
    same["name"] = "same_origin"
    same["config"]["headers"] = {"X-API-Key": "{{ secrets.token }}"}
    tool = await make_tool(client, headers, same)
    report = (await run(client, headers, tool["id"], order_id="1")).json()
    assert report["result"]["headers"]["x-api-key"] == TOKEN


async def test_order_lookup_against_the_real_connector(
    make_client: ClientFactory, headers: dict[str, str], connector: dict[str, str], stub_url: str
) -> None:
    # No allow-list: the operator's connector is trusted, any other private URL is not.
    client = make_client(connector_url=connector["url"])
    body = {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    tool = await make_tool(client, headers, body)
    assert connector["key"] not in str(tool)

    found = (await run(client, headers, tool["id"], order_id="7")).json()
    assert (found["status"], found["http_status"]) == ("ok", 200)
    assert found["result"]["success"] is True
    assert found["result"]["order"]["id"] == 7
    assert "total_gross_cost" in found["result"]["order"]

    as_number = (await run(client, headers, tool["id"], order_id=7)).json()
    assert as_number["result"]["order"]["id"] == 7

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"kind": "order_lookup", **labels}) or 0.0

    not_found = sample("parley_tool_calls_total", status="not_found")
    failures = sample("parley_tool_call_failures_total")
    missing = (await run(client, headers, tool["id"], order_id="999999")).json()
    assert (missing["status"], missing["http_status"]) == ("not_found", 404)
    assert missing["result"]["success"] is False
    # counted as what it is: not ok, not a failure
    assert sample("parley_tool_calls_total", status="not_found") == not_found + 1
    assert sample("parley_tool_call_failures_total") == failures
    assert (
        'parley_tool_calls_total{kind="order_lookup",status="not_found"}'
        in (await client.get("/metrics")).text
    )

    assert (await run(client, headers, tool["id"], order_id="abc")).status_code == 422

    patched = await client.patch(
        f"/api/tools/{tool['id']}", json={"secrets": {"api_key": "wrong-key-123"}}, headers=headers
    )
    assert patched.status_code == 200
    refused = (await run(client, headers, tool["id"], order_id="7")).json()
    assert (refused["status"], refused["http_status"]) == ("error", 401)
    assert "HTTP 401" in refused["error"]

    # Pointing the tool at another private address goes through the SSRF guard.
    elsewhere = await client.patch(
        f"/api/tools/{tool['id']}", json={"config": {"connector_url": stub_url}}, headers=headers
    )
    assert elsewhere.status_code == 200
    blocked = (await run(client, headers, tool["id"], order_id="7")).json()
    assert blocked["status"] == "error"
    assert "non-public address" in blocked["error"]


async def test_session_actions_answer_the_action_they_ask_for(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    # A test has no live call: the report says what the tool asks the runtime to do, and that it
    # was not performed (a flow's call transfers or ends for real, see tests/telephony/test_transfer.py).
    end = await make_tool(client, headers, {"name": "hang_up", "type": "end_session"})
    report = (await run(client, headers, end["id"], reason="done")).json()
    assert report["status"] == "ok"
    assert report["result"] == {"action": "end_session", "reason": "done", "message": "", "performed": False}

    transfer = await make_tool(
        client, headers, {"name": "to_human", "type": "transfer", "config": {"phone_number": "+4930123456"}}
    )
    report = (await run(client, headers, transfer["id"])).json()
    assert report["status"] == "ok" and report["result"]["performed"] is False
    assert report["result"]["action"] == "transfer"
    assert report["result"]["to"] == "+4930123456"
    assert (await run(client, headers, transfer["id"], phone_number="0301234")).status_code == 422


async def test_a_transfer_target_that_is_not_e164_is_refused_with_a_clear_error(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    for bad in ("030 1234567", "+0301234567", "+49 (30) abc", "+4930123456789012"):
        response = await client.post(
            "/api/tools",
            json={"name": "to_human", "type": "transfer", "config": {"phone_number": bad}},
            headers=headers,
        )
        assert response.status_code == 422, (bad, response.text)
        assert "E.164" in response.text, response.text


async def test_another_organizations_tool_is_404(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    tool = await make_tool(client, headers, http_tool("https://api.example.com/x"))
    bob_org = await create_org(client, BOB, name="Werkstatt Bob")
    bob = auth(BOB, str(bob_org["id"]))
    url = f"/api/tools/{tool['id']}"
    assert (await client.get(url, headers=bob)).status_code == 404
    assert (await client.patch(url, json={"description": "x"}, headers=bob)).status_code == 404
    assert (await client.delete(url, headers=bob)).status_code == 404
    assert (await run(client, bob, tool["id"], order_id="1")).status_code == 404
    assert (await client.get("/api/tools", headers=bob)).json()["items"] == []


async def test_viewers_read_but_cannot_write(
    client: httpx.AsyncClient, headers: dict[str, str], org: str
) -> None:
    tool = await make_tool(client, headers, http_tool("https://api.example.com/x"))
    await client.post(
        f"/api/organizations/{org}/members", json={"subject": "victor", "role": "viewer"}, headers=auth(ALICE)
    )
    viewer = auth(make_token("victor"), org)
    url = f"/api/tools/{tool['id']}"
    assert (await client.get(url, headers=viewer)).status_code == 200
    assert (
        await client.post("/api/tools", json={**http_tool("https://a.example"), "name": "v"}, headers=viewer)
    ).status_code == 403
    assert (await client.patch(url, json={"description": "x"}, headers=viewer)).status_code == 403
    assert (await client.delete(url, headers=viewer)).status_code == 403
    assert (await run(client, viewer, tool["id"], order_id="1")).status_code == 403


async def test_knowledge_search_runs_the_knowledge_service(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    pytest.importorskip("parley.knowledge.service")
    tool = await make_tool(
        client, headers, {"name": "faq", "type": "knowledge_search", "config": {"top_k": 2}}
    )
    report = (await run(client, headers, tool["id"], query="Öffnungszeiten")).json()
    assert report == {
        "status": "ok",
        "http_status": None,
        "latency_ms": report["latency_ms"],
        "result": [],
        "truncated": False,
        "error": None,
    }
    assert (await run(client, headers, tool["id"])).status_code == 422
