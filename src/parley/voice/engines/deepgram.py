"""Deepgram streaming speech recognition over a WebSocket (``/v1/listen``).

Audio goes up as binary PCM16 frames, ``{"type": "CloseStream"}`` ends it, and Deepgram answers
``Results`` messages (``is_final`` false for interim hypotheses). The host is resolved and checked
against the outbound policy first, and the socket is opened to that vetted address only (the TLS
name check still uses the host name), so a WebSocket URL cannot reach a private address either.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio
import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus, WebSocketException

from parley.kit.outbound import OutboundPolicy
from parley.providers.catalog import DeepgramConfig
from parley.voice.engines.base import SttEngine, SttStream, Transcript, VendorError, VendorTimeout, Word

VENDOR = "Deepgram"
MAX_MESSAGE_BYTES = 1024 * 1024


async def vetted_address(policy: OutboundPolicy, host: str, port: int, limit_seconds: float) -> str:
    try:
        with anyio.fail_after(limit_seconds):
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError) as exc:
        raise VendorError(f"{VENDOR}: {host} cannot be resolved.") from exc
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    blocked = [a for a in addresses if not policy.address_allowed(host, a)]
    if blocked or not addresses:
        raise VendorError(
            f"{VENDOR}: {host} resolves to a non-public address ({blocked[0] if blocked else 'none'}); "
            "outbound calls may only reach public addresses unless PARLEY_OUTBOUND_ALLOWLIST allows it."
        )
    return str(addresses[0])


def _ms(seconds: Any) -> int:
    return round(float(seconds) * 1000) if isinstance(seconds, int | float) else 0


def parse_results(message: dict[str, Any]) -> Transcript | None:
    if message.get("type") != "Results":
        return None
    channel = message.get("channel")
    alternatives = channel.get("alternatives") if isinstance(channel, dict) else None
    if not isinstance(alternatives, list) or not alternatives or not isinstance(alternatives[0], dict):
        return None
    best = alternatives[0]
    text = str(best.get("transcript") or "").strip()
    if not text:
        return None
    words = tuple(
        Word(
            str(w.get("punctuated_word") or w.get("word") or ""),
            _ms(w.get("start")),
            _ms(w.get("end")),
            float(w["confidence"]) if isinstance(w.get("confidence"), int | float) else None,
        )
        for w in best.get("words") or []
        if isinstance(w, dict)
    )
    start = _ms(message.get("start"))
    confidence = best.get("confidence")
    return Transcript(
        text,
        bool(message.get("is_final")),
        start,
        start + _ms(message.get("duration")),
        float(confidence) if isinstance(confidence, int | float) else None,
        words,
    )


class DeepgramStream(SttStream):
    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.outgoing: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.finished = False
        self.sender = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        try:
            while True:
                item = await self.outgoing.get()
                if item is None:
                    await self.connection.send(orjson.dumps({"type": "CloseStream"}).decode())
                    return
                await self.connection.send(item)
        except WebSocketException:
            return  # the reader reports the closed connection

    def feed(self, pcm16: bytes) -> None:
        if self.finished:
            raise RuntimeError("the stream is finished")
        if pcm16:
            self.outgoing.put_nowait(pcm16)

    async def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.outgoing.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Transcript]:
        try:
            async for raw in self.connection:
                if isinstance(raw, bytes):
                    continue
                try:
                    message = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise VendorError(f"{VENDOR} sent a message that is not JSON.") from exc
                if isinstance(message, dict) and message.get("type") == "Error":
                    raise VendorError(f"{VENDOR} reported an error and closed the stream.")
                transcript = parse_results(message) if isinstance(message, dict) else None
                if transcript is not None:
                    yield transcript
        except WebSocketException as exc:
            raise VendorError(f"{VENDOR} closed the stream unexpectedly.") from exc

    async def aclose(self) -> None:
        self.finished = True
        self.sender.cancel()
        await self.connection.close()


class DeepgramStt(SttEngine):
    name = "deepgram"

    def __init__(self, config: DeepgramConfig, policy: OutboundPolicy, timeout: float) -> None:
        self.config = config
        self.policy = policy
        self.timeout = timeout

    def url(self, language: str | None, sample_rate: int, phrases: Sequence[str] | None) -> str:
        parts = urlsplit(self.config.base_url)
        scheme = "wss" if parts.scheme in ("https", "wss") else "ws"
        query: list[tuple[str, str]] = [
            ("encoding", "linear16"),
            ("sample_rate", str(sample_rate)),
            ("channels", "1"),
            ("interim_results", "true"),
            ("punctuate", "true"),
            ("model", self.config.model),
            ("language", language or self.config.language),
        ]
        for phrase in list(phrases or [])[:20]:
            query.append(("keywords", phrase[:100]))
        return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/listen?{urlencode(query)}"

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        url = self.url(language, sample_rate, phrases)
        parts = urlsplit(url)
        host = parts.hostname or ""
        secure = parts.scheme == "wss"
        port = parts.port or (443 if secure else 80)
        address = await vetted_address(self.policy, host, port, self.timeout)
        options: dict[str, Any] = {"host": address, "port": port}
        if secure:
            options.update(ssl=ssl.create_default_context(), server_hostname=host)
        try:
            connection = await connect(
                url,
                additional_headers={"Authorization": f"Token {self.config.api_key.get_secret_value()}"},
                open_timeout=self.timeout,
                max_size=MAX_MESSAGE_BYTES,
                proxy=None,
                **options,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403):
                raise VendorError(f"{VENDOR} refused the credentials (HTTP {status}).") from exc
            raise VendorError(f"{VENDOR} refused the stream (HTTP {status}).") from exc
        except TimeoutError as exc:
            raise VendorTimeout(f"{VENDOR} did not answer in time.") from exc
        except (OSError, InvalidHandshake, WebSocketException) as exc:
            raise VendorError(f"{VENDOR} cannot be reached.") from exc
        return DeepgramStream(connection)
