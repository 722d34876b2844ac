"""The connector over real HTTP (uvicorn on a loopback port), including a schemathesis run."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from parley.connector.config import ConnectorSettings
from tests.connector.conftest import DEMO_COUNT, LiveServer


def test_curl_equivalent_returns_a_complete_demo_order(live_server: LiveServer, api_key: str) -> None:
    response = httpx.get(f"{live_server.url}/api/orders/1", headers={"X-API-Key": api_key})
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(response.content))
    assert "server" not in response.headers
    body = response.json()
    assert body["success"] is True and body["order"]["id"] == 1
    assert len(body["order"]) == 53


def test_unusual_requests_over_http(live_server: LiveServer, api_key: str) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        assert client.get("/api/orders/abc", headers={"X-API-Key": api_key}).status_code == 422
        assert client.get("/api/orders/%F0%9F%9A%97", headers={"X-API-Key": api_key}).status_code == 422
        assert client.get("/api/orders/1").status_code == 401
        assert client.get("/api/orders/1", headers={"X-API-Key": "k" * 20000}).status_code in {400, 401, 431}
        assert client.get("/api/orders/1?api_key=" + api_key).status_code == 400
        assert client.get("/nowhere").json() == {"detail": "Not Found"}
        # Keep-alive: many requests on one connection.
        for order_id in range(1, 30):
            assert client.get(f"/api/orders/{order_id}", headers={"X-API-Key": api_key}).status_code == 200


async def test_concurrent_requests_each_get_their_own_order(live_server: LiveServer, api_key: str) -> None:
    """64 requests in flight at once (on PostgreSQL they share coalesced queries): every response is
    the order it asked for, or the 404 of its own id."""
    ids = [*range(1, 61), 1, 1, 987654, 987655]
    async with httpx.AsyncClient(
        base_url=live_server.url, headers={"X-API-Key": api_key}, timeout=60
    ) as client:
        responses = await asyncio.gather(*(client.get(f"/api/orders/{i}") for i in ids))
    for order_id, response in zip(ids, responses, strict=True):
        if order_id > DEMO_COUNT:
            assert response.status_code == 404
            assert response.json()["message"] == f"Order {order_id} was not found."
        else:
            assert response.status_code == 200
            assert response.json()["order"]["id"] == order_id


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/orders/{order_id}"), ("GET", "/healthz")])
def test_schemathesis_conformance(live_server: LiveServer, api_key: str, method: str, path: str) -> None:
    """No 5xx, and every status, header and body conforms to the description: with the generated
    X-API-Key values (mostly invalid) and again with a valid key, so ids reach the lookup."""
    api_schema = schemathesis.openapi.from_url(f"{live_server.url}/openapi.json")
    operation = api_schema[path][method]

    @given(case=operation.as_strategy())
    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Any) -> None:
        case.call_and_validate(base_url=live_server.url, checks=CHECKS)
        case.call_and_validate(base_url=live_server.url, headers={"X-API-Key": api_key}, checks=CHECKS)

    run()


def test_live_server_settings_are_isolated(backend: ConnectorSettings) -> None:
    # The live server runs without limits; the contract tests own the limited variants.
    assert backend.rate_limit == 1200
