"""The SSRF guard against real sockets: a local server stands in for an internal service."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.routing import Route

from parley.kit.outbound import (
    BlockedDestination,
    OutboundPolicy,
    explain,
    guarded_client,
    outbound_policy,
    read_limited,
)
from tests.live import serve_in_thread


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("internal secret")


async def _redirect(request: Request) -> RedirectResponse:
    return RedirectResponse(request.query_params["to"])


@pytest.fixture(scope="module")
def internal_server() -> Iterator[str]:
    app = Starlette(routes=[Route("/", _ok), Route("/redirect", _redirect)])
    with serve_in_thread(app) as url:
        yield url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/",
        "http://localhost:{port}/",
        "http://0x7f000001:{port}/",
        "http://2130706433:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://[::1]:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.1/",
        "http://0.0.0.0:{port}/",
    ],
)
async def test_private_destinations_are_refused(internal_server: str, url: str) -> None:
    port = internal_server.rsplit(":", 1)[1]
    async with guarded_client(OutboundPolicy(), timeout=2) as client:
        with pytest.raises(BlockedDestination) as info:
            await client.get(url.format(port=port))
    assert "non-public address" in explain(info.value)


async def test_a_redirect_to_loopback_is_refused(internal_server: str) -> None:
    policy = OutboundPolicy.from_entries(["127.0.0.1/32"])
    # The first hop is allowed here; the guard still vets the hop it is redirected to.
    async with guarded_client(OutboundPolicy.from_entries(["localhost"]), timeout=2) as client:
        with pytest.raises(BlockedDestination):
            await client.get(
                internal_server.replace("127.0.0.1", "localhost") + "/redirect?to=http://[::1]:1/"
            )
    async with guarded_client(policy, timeout=2) as client:
        response = await client.get(internal_server + "/redirect?to=/")
        assert response.text == "internal secret"


async def test_allowlisted_host_and_network_pass(internal_server: str) -> None:
    for entries in (["127.0.0.0/8"], ["127.0.0.1"]):
        async with guarded_client(OutboundPolicy.from_entries(entries), timeout=2) as client:
            assert (await client.get(internal_server)).text == "internal secret"


async def test_non_http_schemes_are_refused() -> None:
    async with guarded_client(OutboundPolicy(), timeout=2) as client:
        with pytest.raises(httpx.HTTPError):
            await client.get("file:///etc/passwd")


async def test_read_limited_caps_the_body(internal_server: str) -> None:
    async with (
        guarded_client(OutboundPolicy.from_entries(["127.0.0.1"]), timeout=2) as client,
        client.stream("GET", internal_server) as response,
    ):
        from parley.kit.errors import UpstreamError

        with pytest.raises(UpstreamError):
            await read_limited(response, 4)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::a00:1",  # NAT64 local-use prefix
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "::127.0.0.1",  # IPv4-compatible
        "::10.0.0.1",
        "::ffff:10.0.0.1",  # IPv4-mapped
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
    ],
)
async def test_ipv6_forms_embedding_a_private_ipv4_are_refused(address: str) -> None:
    # Literal addresses need no DNS, so the guard is exercised exactly where the socket would open.
    async with guarded_client(OutboundPolicy(), timeout=2) as client:
        with pytest.raises(BlockedDestination) as info:
            await client.get(f"http://[{address}]:1/")
    assert "non-public address" in explain(info.value)


def test_embedded_public_ipv4_is_judged_by_that_address() -> None:
    import ipaddress

    policy = OutboundPolicy()
    assert policy.address_allowed("x", ipaddress.ip_address("64:ff9b::808:808"))  # NAT64 of 8.8.8.8
    assert policy.address_allowed("x", ipaddress.ip_address("2002:808:808::1"))  # 6to4 of 8.8.8.8
    assert not policy.address_allowed("x", ipaddress.ip_address("64:ff9b::7f00:1"))
    assert policy.address_allowed("x", ipaddress.ip_address("2606:4700:4700::1111"))


async def test_the_process_policy_is_built_once_and_the_connector_is_added_on_top(
    internal_server: str,
) -> None:
    from parley.config import Settings

    settings = Settings(outbound_allowlist=["10.0.0.0/8", "intranet.example"])
    policy = outbound_policy(settings)
    # Every client reaches the same policy, built at start-up; a new allowlist gets its own.
    assert outbound_policy(settings) is policy
    assert outbound_policy(Settings(outbound_allowlist=["10.0.0.0/8", "intranet.example"])) is policy
    assert outbound_policy(Settings(outbound_allowlist=[])) is not policy
    # Loopback stays refused by the shared policy; allowing() trusts one more host for one client only.
    with pytest.raises(BlockedDestination):
        async with guarded_client(policy, timeout=2) as client:
            await client.get(internal_server)
    trusted = policy.allowing("127.0.0.1")
    async with guarded_client(trusted, timeout=2) as client:
        assert (await client.get(internal_server)).text == "internal secret"
    assert "intranet.example" in trusted.allowed_hosts
    assert "127.0.0.1" not in str(outbound_policy(settings).allowed_networks)
