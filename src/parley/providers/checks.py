"""Checking stored credentials against each provider, with the smallest call that proves them.

Every HTTP call goes through the SSRF-guarded client; SMTP connects only to an address the same
outbound policy allows. A check never raises for an upstream problem: it answers ``ok=False`` with a
sentence that names the cause and never contains a secret.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.to_thread
import httpx
import jwt
import orjson

from parley.config import Settings
from parley.kit.errors import UpstreamError
from parley.kit.outbound import (
    BlockedDestination,
    explain,
    guarded_client,
    outbound_policy,
    read_limited,
)
from parley.providers.catalog import (
    DeepgramConfig,
    ElevenLabsConfig,
    LiveKitConfig,
    OpenAIConfig,
    OpenAISTTConfig,
    OpenAITTSConfig,
    ProviderSettings,
    SMTPConfig,
    TwilioConfig,
)

MAX_RESPONSE_BYTES = 2 * 1024 * 1024
MAX_CHECK_SECONDS = 15.0


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: str


class _Failed(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _timeout(settings: Settings) -> float:
    return min(settings.outbound_timeout, MAX_CHECK_SECONDS)


async def _call(
    settings: Settings,
    what: str,
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    auth: httpx.Auth | tuple[str, str] | None = None,
    json: Any = None,
) -> Any:
    """Make the call; answer the decoded JSON body of a 2xx response, else raise ``_Failed``."""
    async with guarded_client(outbound_policy(settings), timeout=_timeout(settings)) as client:
        try:
            async with client.stream(method, url, headers=headers, auth=auth, json=json) as response:
                body = await read_limited(response, MAX_RESPONSE_BYTES)
        except httpx.HTTPError as exc:
            raise _Failed(f"{what}: {explain(exc)}") from exc
        except UpstreamError as exc:
            raise _Failed(f"{what}: {exc.detail}") from exc
    status = response.status_code
    if status in (401, 403):
        raise _Failed(f"{what} refused the credentials (HTTP {status}).")
    if status == 404:
        raise _Failed(f"{what} answered 404 Not Found; check the base URL.")
    if not 200 <= status < 300:
        raise _Failed(f"{what} answered HTTP {status}.")
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError as exc:
        raise _Failed(f"{what} answered, but not with JSON; check the base URL.") from exc


async def _check_openai_compatible(
    settings: Settings, config: OpenAIConfig | OpenAISTTConfig | OpenAITTSConfig
) -> CheckResult:
    data = await _call(
        settings,
        "The OpenAI-compatible endpoint",
        "GET",
        f"{config.base_url}/models",
        headers={"Authorization": f"Bearer {config.api_key.get_secret_value()}"},
    )
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return CheckResult(False, "The endpoint answered, but not with an OpenAI model list.")
    ids = {str(m.get("id")) for m in models if isinstance(m, dict)}
    listed = "is listed" if config.model in ids else "is not among them"
    return CheckResult(True, f"Connected; {len(ids)} models available, {config.model!r} {listed}.")


async def _check_deepgram(settings: Settings, config: DeepgramConfig) -> CheckResult:
    data = await _call(
        settings,
        "Deepgram",
        "GET",
        f"{config.base_url}/projects",
        headers={"Authorization": f"Token {config.api_key.get_secret_value()}"},
    )
    projects = data.get("projects") if isinstance(data, dict) else None
    count = len(projects) if isinstance(projects, list) else 0
    return CheckResult(True, f"Connected to Deepgram; the key sees {count} project(s).")


async def _check_elevenlabs(settings: Settings, config: ElevenLabsConfig) -> CheckResult:
    await _call(
        settings,
        "ElevenLabs",
        "GET",
        f"{config.base_url}/v1/user",
        headers={"xi-api-key": config.api_key.get_secret_value()},
    )
    return CheckResult(True, "Connected to ElevenLabs; the API key is valid.")


async def _check_twilio(settings: Settings, config: TwilioConfig) -> CheckResult:
    data = await _call(
        settings,
        "Twilio",
        "GET",
        f"{config.api_base}/2010-04-01/Accounts/{config.account_sid}.json",
        auth=(config.account_sid, config.auth_token.get_secret_value()),
    )
    info = data if isinstance(data, dict) else {}
    name = str(info.get("friendly_name") or config.account_sid)[:120]
    status = str(info.get("status") or "unknown")[:40]
    if status not in ("active", "unknown"):
        return CheckResult(False, f"The Twilio account {name!r} is {status}, not active.")
    return CheckResult(True, f"Connected to Twilio account {name!r} (status {status}).")


def livekit_token(config: LiveKitConfig, *, identity: str = "parley-provider-check", ttl: int = 300) -> str:
    """An access token in LiveKit's claim format, allowed to list rooms."""
    now = int(time.time())
    claims = {
        "iss": config.api_key,
        "sub": identity,
        "nbf": now - 5,
        "iat": now,
        "exp": now + ttl,
        "video": {"roomList": True},
    }
    return jwt.encode(claims, config.api_secret.get_secret_value(), algorithm="HS256")


def _livekit_http_url(url: str) -> str:
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


async def _check_livekit(settings: Settings, config: LiveKitConfig) -> CheckResult:
    data = await _call(
        settings,
        "LiveKit",
        "POST",
        f"{_livekit_http_url(config.url)}/twirp/livekit.RoomService/ListRooms",
        headers={"Authorization": f"Bearer {livekit_token(config)}"},
        json={},
    )
    rooms = data.get("rooms") if isinstance(data, dict) else None
    count = len(rooms) if isinstance(rooms, list) else 0
    return CheckResult(True, f"Connected to LiveKit; {count} active room(s).")


class _PinnedSMTP(smtplib.SMTP):
    """smtplib's client, connecting to one vetted address while TLS still checks the host name."""

    def __init__(self, address: str, timeout: float) -> None:
        self._address = address
        super().__init__(timeout=timeout)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        return socket.create_connection((self._address, port), timeout)


def _smtp_session(config: SMTPConfig, address: str, timeout: float) -> str:
    host = config.host.strip("[]")
    with _PinnedSMTP(address, timeout) as smtp:
        smtp.connect(host, config.port)
        smtp.ehlo()
        steps = ["EHLO"]
        if config.starttls:
            if not smtp.has_extn("starttls"):
                raise _Failed(
                    "The SMTP server does not offer STARTTLS; turn starttls off only if that is intended."
                )
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
            steps.append("STARTTLS")
        if config.username:
            password = config.password.get_secret_value() if config.password else ""
            smtp.login(config.username, password)
            steps.append("LOGIN")
        smtp.quit()
        steps.append("QUIT")
    return " → ".join(steps)


async def _check_smtp(settings: Settings, config: SMTPConfig) -> CheckResult:
    host = config.host.strip("[]")
    policy = outbound_policy(settings)
    try:
        infos = await anyio.getaddrinfo(host, config.port, type=socket.SOCK_STREAM)
    except OSError:
        return CheckResult(False, f"The SMTP host {host!r} cannot be resolved.")
    addresses = [str(info[4][0]).split("%", 1)[0] for info in infos]
    import ipaddress

    blocked = [a for a in addresses if not policy.address_allowed(host, ipaddress.ip_address(a))]
    if blocked or not addresses:
        return CheckResult(
            False,
            f"{host} resolves to a non-public address ({blocked[0] if blocked else 'none'}); outbound calls "
            "may only reach public addresses unless PARLEY_OUTBOUND_ALLOWLIST allows it.",
        )
    try:
        steps = await anyio.to_thread.run_sync(_smtp_session, config, addresses[0], _timeout(settings))
    except _Failed as exc:
        return CheckResult(False, exc.detail)
    except smtplib.SMTPAuthenticationError as exc:
        return CheckResult(False, f"The SMTP server refused the login ({exc.smtp_code}).")
    except smtplib.SMTPNotSupportedError:
        return CheckResult(False, "The SMTP server does not support login (AUTH) on this connection.")
    except smtplib.SMTPResponseException as exc:
        return CheckResult(False, f"The SMTP server answered {exc.smtp_code}.")
    except ssl.SSLError as exc:
        return CheckResult(False, f"The TLS handshake with the SMTP server failed ({exc.reason or 'error'}).")
    except TimeoutError:
        return CheckResult(False, "The SMTP server did not answer in time.")
    except (smtplib.SMTPException, OSError):
        return CheckResult(False, "The SMTP server cannot be reached.")
    return CheckResult(True, f"Connected to {host}:{config.port} ({steps}).")


Checker = Callable[[Settings, Any], Awaitable[CheckResult]]

CHECKS: dict[str, Checker] = {
    "openai": _check_openai_compatible,
    "openai_stt": _check_openai_compatible,
    "openai_tts": _check_openai_compatible,
    "deepgram": _check_deepgram,
    "elevenlabs": _check_elevenlabs,
    "twilio": _check_twilio,
    "livekit": _check_livekit,
    "smtp": _check_smtp,
}


def register_check(key: str, checker: Checker) -> None:
    """Add the check of a provider whose engine lives in a package above this one (the offline voice
    engines of :mod:`parley.voice.checks`): providers never import the engines they configure."""
    CHECKS[key] = checker


async def run_check(settings: Settings, key: str, config: ProviderSettings) -> tuple[CheckResult, float]:
    """Run the provider's check; answer its result and the time it took in milliseconds."""
    started = time.perf_counter()
    try:
        checker = CHECKS.get(key)
        if checker is None:  # only when the voice package was not loaded in this process
            return CheckResult(False, f"This server cannot check {key!r} providers."), 0.0
        result = await checker(settings, config)
    except _Failed as exc:
        result = CheckResult(False, exc.detail)
    except BlockedDestination as exc:  # pragma: no cover - _call turns these into _Failed already
        result = CheckResult(False, str(exc))
    return result, round((time.perf_counter() - started) * 1000, 1)
