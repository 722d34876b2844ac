"""HTTP tools that sign in with an integration connection: the calendar booking of docs/tools.md,
end to end against the local OAuth 2.0 server (tests/stubs/oauth2.py) and its protected calendar."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import update

from parley.integrations.models import IntegrationConnection
from parley.integrations.service import access_token_for
from parley.kit.db import unit_of_work, utcnow
from tests.conftest import auth
from tests.integrations.conftest import Provider, admin_headers
from tests.integrations.helpers import connect_fully, put_client
from tests.organizations.test_router import BOB, create_org

SCOPES = ["calendar", "offline_access"]


def booking_tool(provider: Provider, connection_id: str, **auth_overrides: Any) -> dict[str, Any]:
    """The worked example of docs/tools.md, pointed at the local calendar."""
    return {
        "name": "book_appointment",
        "type": "http",
        "description": "Book a repair appointment in the workshop calendar.",
        "config": {
            "method": "POST",
            "url": f"{provider.url}/calendar/events",
            "body": {"start": "{{ start }}", "minutes": 30, "name": "{{ name }}"},
            "parameters": {
                "type": "object",
                "properties": {"start": {"type": "string"}, "name": {"type": "string"}},
                "required": ["start", "name"],
            },
            "auth": {"type": "connection", "connection_id": connection_id, **auth_overrides},
            "response_mapping": {"event_id": "/event/id", "starts": "/event/start"},
        },
    }


async def connected(client: httpx.AsyncClient, provider: Provider) -> tuple[dict[str, str], str]:
    headers = await admin_headers(client)
    await put_client(client, headers, provider, scopes=SCOPES)
    out = await connect_fully(client, headers)
    return headers, str(out["connection_id"])


async def create_tool(client: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]) -> str:
    response = await client.post("/api/tools", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def run(client: httpx.AsyncClient, headers: dict[str, str], tool_id: str, **arguments: Any) -> Any:
    response = await client.post(f"/api/tools/{tool_id}/test", json={"arguments": arguments}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_tool_books_with_the_connections_bearer_token(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers, connection_id = await connected(client, provider)
    tool = await client.post("/api/tools", json=booking_tool(provider, connection_id), headers=headers)
    assert tool.status_code == 200, tool.text
    assert tool.json()["config"]["auth"] == {
        "type": "connection",
        "connection_id": connection_id,
        "as": "bearer",
    }
    out = await run(client, headers, tool.json()["id"], start="2026-12-01T09:00:00", name="Ada Lovelace")
    assert out["status"] == "ok" and out["http_status"] == 201, out
    assert out["result"] == {"event_id": "evt-1", "starts": "2026-12-01T09:00:00"}
    assert provider.stub.events[0]["name"] == "Ada Lovelace"
    # the token the calendar saw is the connection's current one, and no refresh was needed
    [issued] = [t for t in provider.stub.access_tokens]
    assert provider.stub.calendar_tokens == [issued] and provider.stub.refreshes() == []
    # an upstream refusal on the merits stays the upstream's answer
    taken = await run(client, headers, tool.json()["id"], start="2026-12-01T09:15:00", name="Grace Hopper")
    assert (taken["status"], taken["http_status"]) == ("error", 409)


async def test_an_expiring_token_is_refreshed_before_the_call(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    provider.stub.access_ttl = 45  # inside the 60 s margin: refreshed before every call
    headers, connection_id = await connected(client, provider)
    tool_id = await create_tool(client, headers, booking_tool(provider, connection_id))
    out = await run(client, headers, tool_id, start="2026-12-02T10:00:00", name="Ada")
    assert out["status"] == "ok", out
    [grant] = provider.stub.refreshes()
    # the calendar saw the refreshed token, not the one from the authorization
    assert provider.stub.calendar_tokens[-1] == list(provider.stub.access_tokens)[-1]
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["last_refreshed_at"] is not None and grant["grant_type"] == "refresh_token"


async def test_a_token_in_a_configured_header(client: httpx.AsyncClient, provider: Provider) -> None:
    headers, connection_id = await connected(client, provider)
    body = booking_tool(provider, connection_id, **{"as": {"header": "Authorization", "prefix": "Bearer "}})
    tool_id = await create_tool(client, headers, body)
    assert (await run(client, headers, tool_id, start="2026-12-03T08:00:00", name="Ada"))["status"] == "ok"
    # a prefix without the scheme reaches the calendar as a malformed credential: 401 with the reason
    body["config"]["auth"]["as"] = {"header": "Authorization", "prefix": ""}
    body["name"] = "book_plain"
    plain = await create_tool(client, headers, body)
    out = await run(client, headers, plain, start="2026-12-03T09:00:00", name="Ada")
    assert (out["status"], out["http_status"]) == ("error", 401)
    assert "refused the connection's access token" in out["error"]


async def test_a_revoked_access_token_is_refreshed_once_and_retried(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers, connection_id = await connected(client, provider)
    tool_id = await create_tool(client, headers, booking_tool(provider, connection_id))
    provider.stub.access_tokens.clear()  # the provider revoked the access token before its expiry
    out = await run(client, headers, tool_id, start="2026-12-04T08:00:00", name="Ada")
    assert out["status"] == "ok", out
    assert len(provider.stub.refreshes()) == 1


async def test_a_revoked_connection_is_a_tool_error_and_the_flow_falls_back(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    provider.stub.access_ttl = 45
    headers, connection_id = await connected(client, provider)
    tool_id = await create_tool(client, headers, booking_tool(provider, connection_id))
    for grant in provider.stub.refresh_tokens.values():
        grant["active"] = False  # the customer revoked Parley's access at the provider
    flow = {
        "start_node": "book",
        "nodes": [
            {
                "id": "book",
                "type": "tool",
                "tool": "book_appointment",
                "arguments": {"start": "2026-12-05T08:00:00", "name": "Ada"},
                "result_variable": "booking",
                "on_error": "sorry",
                "next": "done",
            },
            {"id": "done", "type": "end", "text": "You are booked for {{ booking.starts }}."},
            {"id": "sorry", "type": "end", "text": "I cannot book right now; we will call you back."},
        ],
    }
    created = await client.post("/api/flows", json={"name": "Booking", "definition": flow}, headers=headers)
    assert created.status_code == 200, created.text
    flow_id = created.json()["id"]
    assert (await client.post(f"/api/flows/{flow_id}/publish", headers=headers)).status_code == 200
    started = await client.post("/api/sessions", json={"flow_id": flow_id}, headers=headers)
    assert started.status_code == 200, started.text
    assert "I cannot book right now" in started.text
    assert provider.stub.calendar_tokens == []  # nothing reached the calendar
    session_id = started.json()["id"]
    call = (await client.get(f"/api/calls?session_id={session_id}", headers=headers)).json()["items"][0]
    record = (await client.get(f"/api/calls/{call['id']}", headers=headers)).json()
    [tool_call] = record["tool_calls"]
    assert tool_call["status"] == "error"
    assert "invalid_grant" in tool_call["error"] and "connect" in tool_call["error"].lower()
    shown = (await client.get(f"/api/integrations/connections/{connection_id}", headers=headers)).json()
    assert shown["status"] == "refresh_failed"
    # a disconnected account is a tool error too, with its own reason
    assert (
        await client.delete(f"/api/integrations/connections/{connection_id}", headers=headers)
    ).status_code == 200
    out = await run(client, headers, tool_id, start="2026-12-05T09:00:00", name="Ada")
    assert out["status"] == "error" and "no longer exists" in out["error"]


async def test_the_connection_is_checked_on_write(client: httpx.AsyncClient, provider: Provider) -> None:
    headers, connection_id = await connected(client, provider)
    unknown = await client.post("/api/tools", json=booking_tool(provider, "icn_nope"), headers=headers)
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "config", "auth", "connection_id"]
    # another organization's connection is as unknown as none
    other_org = await create_org(client, BOB, "Other shop")
    other = auth(BOB, str(other_org["id"]))
    foreign = await client.post("/api/tools", json=booking_tool(provider, connection_id), headers=other)
    assert foreign.status_code == 422 and connection_id in foreign.text
    # the token header cannot be set twice; a bad placement is refused
    body = booking_tool(provider, connection_id)
    body["config"]["headers"] = {"authorization": "Bearer {{ secrets.token }}"}
    twice = await client.post("/api/tools", json=body, headers=headers)
    assert twice.status_code == 422 and "carries the connection's token" in twice.text
    for placement in ("basic", {"header": "X Token"}, {"prefix": "Token "}):
        body = booking_tool(provider, connection_id, **{"as": placement})
        assert (await client.post("/api/tools", json=body, headers=headers)).status_code == 422
    # an update is checked the same way
    tool_id = await create_tool(client, headers, booking_tool(provider, connection_id))
    config = booking_tool(provider, "icn_gone")["config"]
    patched = await client.patch(f"/api/tools/{tool_id}", json={"config": config}, headers=headers)
    assert patched.status_code == 422


async def test_no_transaction_is_held_while_the_provider_refreshes(
    client: httpx.AsyncClient, provider: Provider, app: Any
) -> None:
    """While the token endpoint is answering, the connection's row can be written by others (before:
    the refresh held its row lock, and on SQLite the database's write lock, across the provider call)."""
    _, connection_id = await connected(client, provider)
    arrived, release = threading.Event(), threading.Event()
    provider.stub.refresh_gate = (arrived, release)
    db, settings = app.state.db, app.state.settings
    refreshing = asyncio.create_task(access_token_for(db, settings, connection_id, force=True))
    try:
        assert await asyncio.to_thread(arrived.wait, 30)
        # before, this waited for the refresh's lock (a guard, not a timing: it fails instead of hanging)
        async with asyncio.timeout(60), unit_of_work(db) as session:
            await session.execute(
                update(IntegrationConnection)
                .where(IntegrationConnection.id == connection_id)
                .values(updated_at=utcnow())
            )
        assert not refreshing.done()
    finally:
        release.set()
    token = await refreshing
    assert token.refreshed and len(provider.stub.refreshes()) == 1


async def test_a_lease_held_elsewhere_keeps_the_valid_token(
    client: httpx.AsyncClient, provider: Provider, app: Any
) -> None:
    """Another process is refreshing (its lease stands): a caller whose token is still valid uses it and
    spends no refresh token of its own; once the lease has lapsed the refresh goes ahead."""
    provider.stub.access_ttl = 45
    _, connection_id = await connected(client, provider)
    db, settings = app.state.db, app.state.settings
    async with unit_of_work(db) as session:
        await session.execute(
            update(IntegrationConnection)
            .where(IntegrationConnection.id == connection_id)
            .values(
                version=IntegrationConnection.version + 1, refresh_lease_until=utcnow() + timedelta(minutes=1)
            )
        )
    held = await access_token_for(db, settings, connection_id, margin=60)
    assert held.refreshed is False and provider.stub.refreshes() == []
    async with unit_of_work(db) as session:
        await session.execute(
            update(IntegrationConnection)
            .where(IntegrationConnection.id == connection_id)
            .values(refresh_lease_until=utcnow() - timedelta(seconds=1))
        )
    lapsed = await access_token_for(db, settings, connection_id, margin=60)
    assert lapsed.refreshed is True and len(provider.stub.refreshes()) == 1


async def test_an_imported_tool_needs_a_connection_of_this_organization(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers, connection_id = await connected(client, provider)
    tool = booking_tool(provider, "icn_from_elsewhere")
    document = {
        "format": "parley.flow/v1",
        "name": "Booking",
        "definition": {
            "start_node": "book",
            "nodes": [
                {"id": "book", "type": "tool", "tool": "book_appointment", "arguments": {}, "next": "bye"},
                {"id": "bye", "type": "end", "text": "Bye."},
            ],
        },
        "tools": [{**tool, "secret_names": []}],
    }
    refused = await client.post("/api/flows/import", json=document, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "tools", 0, "config", "auth", "connection_id"]
    document["tools"][0]["config"]["auth"]["connection_id"] = connection_id
    imported = await client.post("/api/flows/import", json=document, headers=headers)
    assert imported.status_code == 200, imported.text
    assert imported.json()["created_tools"] == ["book_appointment"]
