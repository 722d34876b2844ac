"""Metrics (turn latencies, tool calls, sessions, live calls), tracing with the in-memory exporter."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from parley.kit.metrics import observe_turn
from parley.kit.tracing import install_tracing, instrument_engine
from tests.conftest import auth, make_token

FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "n",
            "kind": "digits",
            "prompt": "Number?",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Bye {{ n }}."},
    ],
}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def _org(client: httpx.AsyncClient, sub: str) -> dict[str, str]:
    token = make_token(sub)
    org = (await client.post("/api/organizations", json={"name": sub}, headers=auth(token))).json()["id"]
    return auth(token, org)


async def test_turns_tools_and_sessions_are_measured(client: httpx.AsyncClient) -> None:
    headers = await _org(client, "ops-metrics")
    engine_turns = sample("parley_turn_latency_seconds_count", stage="engine")
    failures = sample("parley_tool_call_failures_total", kind="http")
    session_actions = sample("parley_tool_calls_total", kind="end_session", status="ok")

    flow = (await client.post("/api/flows", json={"name": "M", "definition": FLOW}, headers=headers)).json()
    assert (await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)).status_code == 200
    session = (await client.post("/api/sessions", json={"flow_id": flow["id"]}, headers=headers)).json()
    metrics = (await client.get("/metrics")).text
    assert "parley_sessions_active 1.0" in metrics or "parley_sessions_active " in metrics
    assert sample("parley_sessions_active") >= 1
    reply = await client.post(f"/api/sessions/{session['id']}/messages", json={"text": "42"}, headers=headers)
    assert reply.status_code == 200, reply.text
    assert sample("parley_turn_latency_seconds_count", stage="engine") == engine_turns + 2

    private = {
        "name": "private",
        "type": "http",
        "config": {"method": "GET", "url": "http://10.0.0.1/orders", "timeout_seconds": 2},
    }
    tool = (await client.post("/api/tools", json=private, headers=headers)).json()
    report = (
        await client.post(f"/api/tools/{tool['id']}/test", json={"arguments": {}}, headers=headers)
    ).json()
    assert report["status"] == "error"
    hang_up = (
        await client.post("/api/tools", json={"name": "bye", "type": "end_session"}, headers=headers)
    ).json()
    await client.post(f"/api/tools/{hang_up['id']}/test", json={"arguments": {}}, headers=headers)
    assert sample("parley_tool_call_failures_total", kind="http") == failures + 1
    assert sample("parley_tool_calls_total", kind="end_session", status="ok") == session_actions + 1

    text = (await client.get("/metrics")).text
    for name in (
        "parley_http_requests_total",
        "parley_turn_latency_seconds_bucket",
        "parley_tool_calls_total",
        "parley_tool_call_duration_seconds_bucket",
        "parley_sessions_active",
        "parley_draining",
    ):
        assert name in text


def test_voice_stages_are_histogram_stages() -> None:
    before = sample("parley_turn_latency_seconds_count", stage="voice_to_voice")
    observe_turn({"voice_to_voice_ms": 420.0, "stt_final_ms": None, "unknown_ms": 3.0})
    assert sample("parley_turn_latency_seconds_count", stage="voice_to_voice") == before + 1
    assert sample("parley_turn_latency_seconds_sum", stage="unknown") == 0.0


async def test_tracing_spans_requests_and_sql(settings: Settings, database: Database) -> None:
    app = create_app(settings, database=database)
    assert getattr(app.state, "tracer_provider", None) is None  # off without PARLEY_OTEL_ENDPOINT
    exporter = InMemorySpanExporter()
    assert install_tracing(app, settings, exporter=exporter)
    instrument_engine(app, database.engine)
    token = make_token("ops-tracing")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        created = await client.post("/api/organizations", json={"name": "Traced"}, headers=auth(token))
        assert created.status_code == 200
        await client.get("/healthz")
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind.name == "SERVER"]
    assert [s.attributes.get("http.route") for s in servers if s.attributes] == ["/api/organizations"]
    server = servers[0]
    sql = [s for s in spans if s.attributes and "db.statement" in s.attributes]
    assert sql, [s.name for s in spans]
    assert all(s.context.trace_id == server.context.trace_id for s in sql)
    resource: Any = server.resource.attributes
    assert resource["service.name"] == "parley-platform"
