"""Connections kept between guarded clients (``keep_connections=True``, the tools' calls): reused for
the next call to the same origin under the same policy, and nothing else is shared."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

from parley.kit import outbound
from parley.kit.outbound import (
    BlockedDestination,
    OutboundPolicy,
    close_kept_connections,
    guarded_client,
    read_limited,
)
from tests.live import serve_in_thread


async def _who(request: Request) -> JSONResponse:
    client = request.client
    response = JSONResponse(
        {"port": client.port if client else None, "cookie": request.headers.get("cookie")}
    )
    response.set_cookie("tenant", request.query_params.get("tenant", "a"))
    return response


async def _redirect(request: Request) -> RedirectResponse:
    return RedirectResponse(request.query_params["to"])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve_in_thread(Starlette(routes=[Route("/who", _who), Route("/redirect", _redirect)])) as url:
        yield url


LOOPBACK = OutboundPolicy.from_entries(["127.0.0.1"])


async def _call(policy: OutboundPolicy, url: str) -> dict[str, object]:
    async with (
        guarded_client(policy, timeout=10, keep_connections=True) as client,
        client.stream("GET", url) as response,
    ):
        return dict(json.loads(await read_limited(response, 10_000)))


async def test_the_next_call_to_the_origin_reuses_the_connection_and_no_cookie(server: str) -> None:
    try:
        first = await _call(LOOPBACK, f"{server}/who?tenant=a")
        second = await _call(LOOPBACK, f"{server}/who?tenant=b")
        assert second["port"] == first["port"]  # the same TCP connection
        # The first client's cookie went with that client: the second one sends none.
        assert first["cookie"] is None and second["cookie"] is None
    finally:
        await close_kept_connections()


async def test_calls_under_another_policy_do_not_use_connections_vetted_under_this_one(server: str) -> None:
    try:
        await _call(LOOPBACK, f"{server}/who")
        with pytest.raises(BlockedDestination):
            await _call(OutboundPolicy(), f"{server}/who")
    finally:
        await close_kept_connections()


async def test_a_redirect_is_checked_at_every_hop_with_kept_connections(server: str) -> None:
    try:
        # An allow-listed host name redirecting to loopback by address: the address is not allowed.
        policy = OutboundPolicy.from_entries(["localhost"])
        port = server.rsplit(":", 1)[1]
        with pytest.raises(BlockedDestination):
            await _call(policy, f"http://localhost:{port}/redirect?to=http://127.0.0.1:{port}/who")
    finally:
        await close_kept_connections()


async def test_closing_the_kept_connections_makes_the_next_call_open_a_new_one(server: str) -> None:
    try:
        first = await _call(LOOPBACK, f"{server}/who")
        await close_kept_connections()
        second = await _call(LOOPBACK, f"{server}/who")
        assert second["port"] != first["port"]
    finally:
        await close_kept_connections()


async def test_over_the_limit_the_least_recently_used_idle_origin_is_closed(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbound, "MAX_SHARED_ORIGINS", 1)
    port = server.rsplit(":", 1)[1]
    policy = OutboundPolicy.from_entries(["127.0.0.1", "localhost"])
    try:
        first = await _call(policy, f"http://127.0.0.1:{port}/who")
        await _call(policy, f"http://localhost:{port}/who")  # a second origin: the first one is closed
        again = await _call(policy, f"http://127.0.0.1:{port}/who")
        assert again["port"] != first["port"]
        # Within the limit the connection is kept.
        assert (await _call(policy, f"http://127.0.0.1:{port}/who"))["port"] == again["port"]
    finally:
        await close_kept_connections()
