"""The one HTTP client for user-supplied URLs, guarded against SSRF.

Every address a host name resolves to must be globally routable, unless the operator allow-lists the
host or its network (``PARLEY_OUTBOUND_ALLOWLIST``: host names or CIDRs). The check runs where the
socket is opened, on the very address connected to, so DNS rebinding between check and connect is not
possible; redirects are followed hop by hop and each hop is checked again. Time-outs always apply, and
response bodies are read up to a limit.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import ssl
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass
from typing import Any, cast

import anyio
import httpcore
import httpx

from parley.config import Settings
from parley.kit.errors import UpstreamError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedDestination(httpx.ConnectError):
    """The URL points at an address that outbound calls may not reach."""


@dataclass(frozen=True)
class OutboundPolicy:
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> OutboundPolicy:
        hosts: set[str] = set()
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def allowing(self, *entries: str) -> OutboundPolicy:
        """This policy plus ``entries`` (host names or CIDRs), e.g. the operator's own connector.

        Built once per policy and entries (every ``order_lookup`` call asks for the same one)."""
        return _allowing(self, entries)

    def address_allowed(self, host: str, address: IPAddress) -> bool:
        if host.lower().rstrip(".") in self.allowed_hosts:
            return True
        if any(address in network for network in self.allowed_networks):
            return True
        if isinstance(address, ipaddress.IPv6Address):
            embedded = embedded_ipv4(address)
            if embedded:
                # Translators and tunnels deliver to the IPv4 address inside; judge that one.
                return all(_public(v4) for v4 in embedded)
        return _public(address)


@functools.lru_cache(maxsize=32)
def _allowing(policy: OutboundPolicy, entries: tuple[str, ...]) -> OutboundPolicy:
    extra = OutboundPolicy.from_entries(entries)
    return OutboundPolicy(
        policy.allowed_hosts | extra.allowed_hosts, policy.allowed_networks + extra.allowed_networks
    )


@functools.lru_cache(maxsize=8)
def _built(entries: tuple[str, ...]) -> OutboundPolicy:
    return OutboundPolicy.from_entries(entries)


def outbound_policy(settings: Settings) -> OutboundPolicy:
    """The process's one outbound policy for these settings (``PARLEY_OUTBOUND_ALLOWLIST``).

    Built once, at start-up (the app factory and ``parley worker`` call this first), and shared by
    every client after that. Services are handed settings, not the app's state (they stay free of
    HTTP types), so the built policy is held here, keyed by the allowlist it was built from.
    """
    return _built(tuple(settings.outbound_allowlist))


def _public(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo); [] if none."""
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        # ``::`` and ``::1`` land here too and give 0.0.0.0 / 0.0.0.1: not public, as they should be.
        return [low32]
    if address in _NAT64_LOCAL:
        # RFC 8215 local-use prefix: where the IPv4 address sits depends on the operator; refuse it.
        return [ipaddress.IPv4Address(0)]
    if address in _SIX_TO_FOUR and address.sixtofour is not None:
        return [address.sixtofour]
    if address in _TEREDO and address.teredo is not None:
        server, client = address.teredo
        return [server, client]
    return []


class _PlainStream(httpcore.AsyncNetworkStream, asyncio.Protocol):
    """A plain-TCP stream straight on asyncio's transport, for ``http://`` origins' kept connections.

    httpcore's anyio stream costs a cancel scope per read and write, a socket poll to tell whether an
    idle connection is still good and an async-library lookup per operation; this one reads what the
    event loop has already received and knows when the server closed. ``https://`` origins keep the
    anyio stream (TLS)."""

    _HIGH_WATER = 256 * 1024  # stop reading from the socket beyond this much unread data

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._reading_paused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass: no isinstance check).
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > self._HIGH_WATER and self._transport is not None:
            self._transport.pause_reading()
            self._reading_paused = True
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # httpcore.AsyncNetworkStream
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if not self._buffer and not self._eof:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:
                    await self._waiter
                else:
                    async with asyncio.timeout(timeout):
                        await self._waiter
            except TimeoutError as exc:
                raise httpcore.ReadTimeout(str(exc)) from exc
            finally:
                self._waiter = None
        if not self._buffer:
            if self._error is not None:
                raise httpcore.ReadError(str(self._error)) from self._error
            return b""
        data = bytes(self._buffer[:max_bytes])
        del self._buffer[:max_bytes]
        if (
            self._reading_paused
            and len(self._buffer) <= self._HIGH_WATER // 4
            and self._transport is not None
        ):
            self._reading_paused = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport is None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        if self._drained is not None:
            try:
                async with asyncio.timeout(timeout):
                    await self._drained
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from exc
            if self._transport.is_closing():
                raise httpcore.WriteError("the connection is closed")

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        # Never asked for: only http:// origins are given this stream.
        await self.aclose()
        raise httpcore.ConnectError("TLS is not available on a plain stream")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # An idle connection with data or an end of stream waiting is one the server gave up.
            return bool(self._buffer) or self._eof
        if self._transport is None:
            return None
        name = {"client_addr": "sockname", "server_addr": "peername", "socket": "socket"}.get(info)
        return self._transport.get_extra_info(name) if name else None


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: OutboundPolicy, *, plain: bool = False) -> None:
        self.policy = policy
        self.plain = plain  # http:// only: connections are _PlainStream on asyncio's transport
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}") from exc
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
        blocked = [a for a in addresses if not self.policy.address_allowed(host, a)]
        if blocked or not addresses:
            # One private answer is enough to refuse: an attacker controls which answer is used.
            raise BlockedDestination(
                f"{host} resolves to a non-public address ({blocked[0] if blocked else 'none'}); "
                "outbound calls may only reach public addresses unless PARLEY_OUTBOUND_ALLOWLIST allows it"
            )
        if self.plain:
            return await _connect_plain(str(addresses[0]), port, timeout, local_address, socket_options)
        return await self._backend.connect_tcp(
            str(addresses[0]),
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> Any:
        raise BlockedDestination("Unix sockets are not reachable by outbound calls")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


async def _connect_plain(
    address: str,
    port: int,
    timeout: float | None,
    local_address: str | None,
    socket_options: Iterable[Any] | None,
) -> _PlainStream:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            transport, stream = await loop.create_connection(
                _PlainStream, address, port, local_addr=(local_address, 0) if local_address else None
            )
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(str(exc)) from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    sock = transport.get_extra_info("socket")  # TCP_NODELAY is asyncio's default
    for option in socket_options or ():
        sock.setsockopt(*option)
    return stream


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs tens of milliseconds; every guarded client shares one context.
    return httpx.create_ssl_context()


class GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        keepalive_expiry: float = 5.0,
        max_connections: int | None = 100,
        plain: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(verify=_shared_ssl_context(), **kwargs)
        # httpx builds its connection pool without a way to pass a network backend; swap in ours, which
        # vets every address right where the socket is opened.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=_shared_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=20,
            keepalive_expiry=keepalive_expiry,
            network_backend=_GuardedBackend(policy, plain=plain),
        )
        self.plain = plain

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https") or (self.plain and request.url.scheme != "http"):
            raise BlockedDestination(f"the {request.url.scheme!r} scheme is not allowed for outbound calls")
        return await super().handle_async_request(request)


# --- connections kept between clients ---------------------------------------------------------------

# An idle kept connection is closed after this long: shorter than the keep-alive time-outs servers use
# (uvicorn and Node 5 s, nginx 75 s), so a request is not sent on a connection the server is closing.
SHARED_KEEPALIVE_S = 2.0
MAX_SHARED_ORIGINS = 64  # per event loop; the least recently used idle origin's connections are closed


@dataclass
class _Kept:
    transport: GuardedTransport
    in_flight: int = 0


class _Released(httpx.AsyncByteStream):
    """A response body that tells its origin's entry when it is done."""

    def __init__(self, stream: httpx.AsyncByteStream, kept: _Kept) -> None:
        self._stream = stream
        self._kept: _Kept | None = kept

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._kept is not None:
                self._kept.in_flight -= 1
                self._kept = None


# Connections belong to the event loop that opened them: one table per loop, gone with the loop.
_KEPT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OrderedDict[tuple[Any, ...], _Kept]] = (
    weakref.WeakKeyDictionary()
)
_CLOSING: set[asyncio.Task[None]] = set()


def _kept_for(policy: OutboundPolicy, url: httpx.URL) -> _Kept:
    loop = asyncio.get_running_loop()
    table = _KEPT.get(loop)
    if table is None:
        table = _KEPT[loop] = OrderedDict()
    key = (policy, url.scheme, url.host, url.port)
    kept = table.get(key)
    if kept is not None:
        table.move_to_end(key)
        return kept
    # No limit on connections at once (as with a client per call): a slow origin never makes another
    # call wait for a free connection; only up to 20 idle ones are kept.
    kept = table[key] = _Kept(
        GuardedTransport(
            policy,
            keepalive_expiry=SHARED_KEEPALIVE_S,
            max_connections=None,
            plain=url.scheme == "http",  # the origin's scheme is part of the key
        )
    )
    # Over the limit, the least recently used origins with no request under way are closed (never the
    # one just made: its caller is about to use it); busy ones wait for a later turn.
    idle = [k for k, v in table.items() if v.in_flight == 0 and k != key]
    for old_key in idle[: max(len(table) - MAX_SHARED_ORIGINS, 0)]:
        task = loop.create_task(table.pop(old_key).transport.aclose())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
    return kept


class _KeptTransport(httpx.AsyncBaseTransport):
    """Sends each request over its origin's kept connections (opened and vetted by a
    :class:`GuardedTransport`); closing the client leaves them open for the next call."""

    def __init__(self, policy: OutboundPolicy) -> None:
        self.policy = policy

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise BlockedDestination(f"the {request.url.scheme!r} scheme is not allowed for outbound calls")
        kept = _kept_for(self.policy, request.url)
        kept.in_flight += 1
        try:
            response = await kept.transport.handle_async_request(request)
        except BaseException:
            kept.in_flight -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Released(response.stream, kept)
        return response

    async def aclose(self) -> None:
        pass


async def close_kept_connections() -> None:
    """Close the connections kept for this event loop (the app's shutdown)."""
    table = _KEPT.pop(asyncio.get_running_loop(), None)
    for kept in (table or {}).values():
        await kept.transport.aclose()


def guarded_client(
    policy: OutboundPolicy,
    *,
    timeout: float = 10.0,
    max_redirects: int = 5,
    keep_connections: bool = False,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose every connection, redirects included, passes the policy.

    ``keep_connections``: the client sends over connections kept between clients (per event loop,
    policy and origin), so a call to an origin called a moment ago skips the TCP (and TLS) set-up.
    Each client still has its own cookies, headers and time-outs; nothing of a request is kept."""
    transport: httpx.AsyncBaseTransport = (
        _KeptTransport(policy) if keep_connections else GuardedTransport(policy)
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout),
        follow_redirects=True,
        max_redirects=max_redirects,
        trust_env=False,  # proxies from the environment would bypass the address check
        **kwargs,
    )


@dataclass(frozen=True)
class Answer:
    """What :func:`fetch` got back: the last response's status, headers and (capped) body."""

    status_code: int
    headers: httpx.Headers
    content: bytes


@functools.cache
def _client_headers() -> tuple[tuple[bytes, bytes], ...]:
    # The headers an ``httpx.AsyncClient`` sends by default (Accept, Accept-Encoding, Connection,
    # User-Agent), taken once from a client: a :func:`fetch` looks the same to the upstream.
    return tuple(httpx.AsyncClient(trust_env=False).headers.raw)


async def fetch(
    policy: OutboundPolicy,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json: Any = None,
    timeout: float = 10.0,
    limit: int,
    max_redirects: int = 5,
    credentials: Collection[str] = (),
) -> Answer:
    """One call over the connections kept between calls (as ``guarded_client(keep_connections=True)``),
    without building a client: the request goes straight to the kept transport.

    The same guarantees as a guarded client: every connection (each redirect's too) is vetted by the
    policy where it is opened; redirects are followed hop by hop, up to ``max_redirects``, with the
    client's rules (303/302 become GET, Authorization is dropped on a change of origin, and so are the
    headers named in ``credentials``: an API key in a header of its own stays with its origin as a
    bearer token does); ``timeout``
    bounds the whole call (and connecting), however slowly a body trickles in; each body is read up to
    ``limit`` bytes (:class:`UpstreamError` beyond). Nothing outlives the call but the connection: a
    cookie set by a redirect goes to the next hop of this call only, never to another call."""
    merged = httpx.Headers(_client_headers())
    if headers:
        merged.update(headers)
    # Reads and writes need no limit of their own: the whole call's (below) bounds them, and a timer
    # per read and write is work on every call. Connecting keeps its own (the name look-up's too).
    steps = {"connect": timeout, "read": None, "write": None, "pool": timeout}
    request = httpx.Request(method, url, headers=merged, json=json, extensions={"timeout": steps})
    transport = _KeptTransport(policy)
    cookies: httpx.Cookies | None = None
    async with asyncio.timeout(timeout):
        for _hop in range(max_redirects + 1):
            response = await transport.handle_async_request(request)
            response.request = request
            try:
                body = await read_limited(response, limit)  # a redirect's too: its connection is reused
                if not response.has_redirect_location:
                    return Answer(response.status_code, response.headers, body)
                if "set-cookie" in response.headers:
                    cookies = cookies if cookies is not None else httpx.Cookies()
                    cookies.extract_cookies(response)
                request = _redirected(request, response, cookies, credentials)
            finally:
                await response.aclose()
        raise httpx.TooManyRedirects("Exceeded maximum allowed redirects.", request=request)


def _redirected(
    request: httpx.Request,
    response: httpx.Response,
    cookies: httpx.Cookies | None,
    credentials: Collection[str] = (),
) -> httpx.Request:
    """The next hop's request, by the rules of ``httpx.AsyncClient`` (``_build_redirect_request``)."""
    method = request.method
    if (response.status_code in (303, 302) and method != "HEAD") or (
        response.status_code == 301 and method == "POST"
    ):
        method = "GET"
    try:
        url = httpx.URL(response.headers["Location"])
    except httpx.InvalidURL as exc:
        raise httpx.RemoteProtocolError(f"Invalid URL in location header: {exc}.", request=request) from None
    if url.scheme and not url.host:
        url = url.copy_with(host=request.url.host)
    if url.is_relative_url:
        url = request.url.join(url)
    if request.url.fragment and not url.fragment:
        url = url.copy_with(fragment=request.url.fragment)
    headers = httpx.Headers(request.headers)
    old = request.url
    if _origin(url) != _origin(old):
        if not (
            old.host == url.host and _origin(old)[::2] == ("http", 80) and _origin(url)[::2] == ("https", 443)
        ):
            # Not a plain upgrade to HTTPS on the same host: the credentials stay with their origin.
            headers.pop("Authorization", None)
            for name in credentials:
                headers.pop(name, None)
        headers["Host"] = url.netloc.decode("ascii")
    stream: httpx.SyncByteStream | httpx.AsyncByteStream | None = request.stream
    if method != request.method and method == "GET":
        headers.pop("Content-Length", None)
        headers.pop("Transfer-Encoding", None)
        stream = None
    headers.pop("Cookie", None)
    return httpx.Request(
        method, url, headers=headers, cookies=cookies, stream=stream, extensions=request.extensions
    )


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)


async def read_limited(response: httpx.Response, limit: int) -> bytes:
    """Read at most ``limit`` bytes of a streamed response body."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise UpstreamError(f"The upstream response is larger than {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def explain(exc: httpx.HTTPError) -> str:
    """A sentence for an outbound failure, safe to show to the user."""
    if isinstance(exc, BlockedDestination):
        return str(exc)
    if isinstance(exc, httpx.TimeoutException):
        return "The upstream service did not answer in time."
    if isinstance(exc, httpx.TooManyRedirects):
        return "The upstream service redirected too many times."
    if isinstance(exc, httpx.ConnectError):
        return "The upstream service cannot be reached."
    return "The call to the upstream service failed."
