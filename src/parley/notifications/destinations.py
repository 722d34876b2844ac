"""Where a channel may send to: the SSRF guard applied when a channel is saved and when it sends.

HTTP channels send through :func:`parley.kit.outbound.guarded_client`, which checks the very address it
connects to. SMTP is not HTTP, so :func:`open_guarded_socket` does the same for mail servers: resolve,
refuse unless every address is public (or allow-listed), connect to a vetted address. At save time
:func:`check_host` gives the user an early, clear refusal; the send-time check stays the authority
(DNS answers change).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from parley.kit.outbound import IPAddress, OutboundPolicy

# Names that only mean something inside a private network.
_INTERNAL_SUFFIXES = (".internal", ".local", ".localhost", ".localdomain", ".lan", ".home.arpa", ".corp")
_RESOLVE_SECONDS = 3.0


class DestinationRefused(Exception):
    """The host may not be reached; the message is a sentence for the user."""


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(_RESOLVE_SECONDS):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError, ValueError) as exc:
        raise DestinationRefused(f"{host} cannot be resolved; check the address.") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


def _refusal(host: str, address: IPAddress | None) -> DestinationRefused:
    what = f"resolves to a non-public address ({address})" if address else "is an internal name"
    return DestinationRefused(
        f"{host} {what}; notifications may only reach public addresses unless "
        "PARLEY_OUTBOUND_ALLOWLIST allows it."
    )


async def check_host(policy: OutboundPolicy, host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, once all of them are allowed; DestinationRefused otherwise."""
    name = host.lower().rstrip(".")
    if not name:
        raise DestinationRefused("The address has no host name.")
    literal = _literal(name)
    if (
        literal is None
        and name not in policy.allowed_hosts
        and ("." not in name or name.endswith(_INTERNAL_SUFFIXES))
    ):
        raise _refusal(host, None)
    addresses = await resolve(name, port)
    blocked = [a for a in addresses if not policy.address_allowed(name, a)]
    if blocked or not addresses:
        raise _refusal(host, blocked[0] if blocked else None)
    return addresses


async def check_url(policy: OutboundPolicy, url: str) -> None:
    try:
        parts = urlsplit(url)  # "http://[::1" raises ValueError (Invalid IPv6 URL) here
    except ValueError as exc:
        raise DestinationRefused(f"The URL is not valid: {exc}.") from exc
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise DestinationRefused("The URL's port is not valid.") from exc
    await check_host(policy, parts.hostname or "", port)


async def open_guarded_socket(policy: OutboundPolicy, host: str, port: int, seconds: float) -> socket.socket:
    """A connected, non-blocking TCP socket to a vetted address of ``host``."""
    addresses = await check_host(policy, host, port)
    loop = asyncio.get_running_loop()
    last: OSError | None = None
    for address in addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(seconds):
                await loop.sock_connect(sock, (str(address), port))
            return sock
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last = exc
    raise ConnectionError(f"cannot connect to {host}:{port}") from last
