"""``outbound.fetch``, the tools' call without a client per call, against a real server on loopback: the
guarantees of a guarded client (every hop vetted, time-outs for the whole call, the size cap, nothing
kept between calls but the connection) hold without the client."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from parley.kit.errors import UpstreamError
from parley.kit.outbound import BlockedDestination, OutboundPolicy, close_kept_connections, fetch
from tests.live import serve_in_thread


async def _who(request: Request) -> JSONResponse:
    client = request.client
    body = await request.body()
    response = JSONResponse(
        {
            "port": client.port if client else None,
            "method": request.method,
            "cookie": request.headers.get("cookie"),
            "authorization": request.headers.get("authorization"),
            "api_key": request.headers.get("x-api-key"),
            "user_agent": request.headers.get("user-agent"),
            "accept_encoding": request.headers.get("accept-encoding"),
            "body": body.decode(),
        }
    )
    if "tenant" in request.query_params:
        response.set_cookie("tenant", request.query_params["tenant"])
    return response


async def _redirect(request: Request) -> RedirectResponse:
    response = RedirectResponse(
        request.query_params["to"], status_code=int(request.query_params.get("code", 307))
    )
    if "tenant" in request.query_params:
        response.set_cookie("tenant", request.query_params["tenant"])
    return response


async def _loop(request: Request) -> RedirectResponse:
    return RedirectResponse("/loop")


async def _big(request: Request) -> Response:
    return Response(b"x" * 5000)


async def _trickle(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        # A byte every 20 ms: each read is quick, only the whole call's limit stops it.
        for _ in range(1500):
            yield b"x"
            await asyncio.sleep(0.02)

    return StreamingResponse(body())


async def _large(request: Request) -> Response:
    return Response(bytes(range(256)) * 4096)


@pytest.fixture
async def one_shot_server() -> AsyncIterator[str]:
    numbers = itertools.count()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"connection %d" % next(numbers)
        # The answer and the end of the stream together: the client has both before it reads.
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with listener:
        yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = Starlette(
        routes=[
            Route("/who", _who, methods=["GET", "POST"]),
            Route("/redirect", _redirect, methods=["GET", "POST"]),
            Route("/loop", _loop),
            Route("/big", _big),
            Route("/large", _large),
            Route("/trickle", _trickle),
        ]
    )
    with serve_in_thread(app) as url:
        yield url


LOOPBACK = OutboundPolicy.from_entries(["127.0.0.1"])


async def _json(url: str, policy: OutboundPolicy = LOOPBACK, **kwargs: object) -> dict[str, object]:
    answer = await fetch(policy, str(kwargs.pop("method", "GET")), url, limit=10_000, **kwargs)  # type: ignore[arg-type]
    assert answer.status_code == 200
    return dict(httpx.Response(200, content=answer.content).json())


@pytest.fixture(autouse=True)
async def _closed_after() -> AsyncIterator[None]:
    yield
    await close_kept_connections()


async def test_a_cookie_from_one_call_is_not_sent_on_the_next(server: str) -> None:
    first = await _json(f"{server}/who?tenant=a", headers={"X-Parley-Organization": "org_a"})
    second = await _json(f"{server}/who", headers={"X-Parley-Organization": "org_b"})
    assert second["port"] == first["port"]  # the same kept connection
    assert first["cookie"] is None and second["cookie"] is None


async def test_a_cookie_set_by_a_redirect_goes_to_the_next_hop_of_that_call_only(server: str) -> None:
    hop = await _json(f"{server}/redirect?tenant=a&to=/who")
    assert hop["cookie"] == "tenant=a"  # as a client does within one call
    assert (await _json(f"{server}/who"))["cookie"] is None


async def test_the_request_looks_like_a_clients(server: str) -> None:
    seen = await _json(f"{server}/who")
    assert str(seen["user_agent"]).startswith("python-httpx/")
    assert "gzip" in str(seen["accept_encoding"])


async def test_a_redirect_into_a_private_address_is_not_followed(server: str) -> None:
    # The host name is allowed, the address it redirects to is not: the second hop is refused.
    port = server.rsplit(":", 1)[1]
    policy = OutboundPolicy.from_entries(["localhost"])
    assert (await _json(f"http://localhost:{port}/who", policy))["cookie"] is None
    with pytest.raises(BlockedDestination):
        await fetch(
            policy, "GET", f"http://localhost:{port}/redirect?to=http://127.0.0.1:{port}/who", limit=10_000
        )


async def test_a_redirect_to_another_origin_drops_the_authorization(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    policy = OutboundPolicy.from_entries(["127.0.0.1", "localhost"])
    headers = {"Authorization": "Bearer secret"}
    same = await _json(f"{server}/redirect?to=/who", policy, headers=headers)
    assert same["authorization"] == "Bearer secret"
    other = await _json(f"{server}/redirect?to=http://localhost:{port}/who", policy, headers=headers)
    assert other["authorization"] is None


async def test_a_redirect_to_another_origin_drops_the_named_credentials(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    policy = OutboundPolicy.from_entries(["127.0.0.1", "localhost"])
    headers = {"X-API-Key": "k", "X-Other": "o"}
    named = {"credentials": ["X-API-Key"]}
    same = await _json(f"{server}/redirect?to=/who", policy, headers=headers, **named)
    assert same["api_key"] == "k"
    other = await _json(f"{server}/redirect?to=http://localhost:{port}/who", policy, headers=headers, **named)
    assert other["api_key"] is None
    # Not named: it follows, as httpx's client does.
    assert (await _json(f"{server}/redirect?to=http://localhost:{port}/who", policy, headers=headers))[
        "api_key"
    ] == "k"


async def test_a_303_turns_a_post_into_a_get_without_its_body(server: str) -> None:
    kept = await _json(f"{server}/redirect?to=/who", method="POST", json={"a": 1})
    assert (kept["method"], kept["body"]) == ("POST", '{"a":1}')  # 307 keeps both
    seen = await _json(f"{server}/redirect?code=303&to=/who", method="POST", json={"a": 1})
    assert (seen["method"], seen["body"]) == ("GET", "")


async def test_redirects_stop_at_the_limit(server: str) -> None:
    with pytest.raises(httpx.TooManyRedirects):
        await fetch(LOOPBACK, "GET", f"{server}/loop", limit=10_000, max_redirects=3)


async def test_the_body_is_read_up_to_the_limit(server: str) -> None:
    assert len((await fetch(LOOPBACK, "GET", f"{server}/big", limit=5000)).content) == 5000
    with pytest.raises(UpstreamError):
        await fetch(LOOPBACK, "GET", f"{server}/big", limit=4999)


async def test_a_slowly_trickling_body_still_times_out(server: str) -> None:
    with pytest.raises(TimeoutError):
        await fetch(LOOPBACK, "GET", f"{server}/trickle", timeout=0.5, limit=1_000_000)


async def test_a_private_address_is_refused_without_the_allowlist(server: str) -> None:
    with pytest.raises(BlockedDestination):
        await fetch(OutboundPolicy(), "GET", f"{server}/who", limit=10_000)


# --- http:// origins: connections straight on asyncio's transport ------------------------------------


async def test_a_body_larger_than_the_read_buffer_arrives_whole(server: str) -> None:
    answer = await fetch(LOOPBACK, "GET", f"{server}/large", limit=2_000_000)
    assert answer.content == bytes(range(256)) * 4096


async def test_a_connection_the_server_closed_while_idle_is_replaced(one_shot_server: str) -> None:
    # The server answers one request per connection and closes it without saying so (no
    # "Connection: close"): the next call sees the kept connection is finished and opens another.
    first = await fetch(LOOPBACK, "GET", f"{one_shot_server}/", limit=10_000)
    second = await fetch(LOOPBACK, "GET", f"{one_shot_server}/", limit=10_000)
    assert first.content != second.content  # each answer names the connection it came on
    assert first.status_code == second.status_code == 200


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        with pytest.raises(httpx.ConnectError):
            await fetch(LOOPBACK, "GET", f"http://127.0.0.1:{port}/", limit=10_000)


async def test_an_https_origin_is_spoken_to_in_tls(server: str) -> None:
    # The loopback server speaks plain HTTP: a TLS handshake with it fails, nothing is sent in clear.
    with pytest.raises(httpx.ConnectError):
        await fetch(LOOPBACK, "GET", server.replace("http://", "https://") + "/who", limit=10_000)


async def test_a_server_that_never_answers_times_out() -> None:
    # No read has a limit of its own: the whole call's limit ends the wait for the answer.
    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await done.wait()
        writer.close()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    async with listener:
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/"
        try:
            with pytest.raises(TimeoutError):
                await fetch(LOOPBACK, "GET", url, timeout=0.2, limit=10_000)
        finally:
            done.set()


def test_kept_connections_work_on_uvloop(server: str) -> None:
    # The platform may run on uvloop, whose transports are not asyncio.Transport subclasses.
    uvloop = pytest.importorskip("uvloop")

    async def twice() -> tuple[dict[str, object], dict[str, object]]:
        try:
            return await _json(f"{server}/who"), await _json(f"{server}/who")
        finally:
            await close_kept_connections()

    loop = uvloop.new_event_loop()
    try:
        first, second = loop.run_until_complete(twice())
    finally:
        loop.close()
    assert second["port"] == first["port"]
