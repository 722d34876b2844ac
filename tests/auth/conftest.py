"""Helpers for the authentication tests: error-shape assertions, hand-made tokens, a real JWKS server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database

ISSUER = "https://idp.test/"
AUDIENCE = "parley"
JWKS_PATH = "/.well-known/jwks.json"


# --- assertions -------------------------------------------------------------------------------------


def assert_error(response: httpx.Response, status: int, code: str, *fragments: str) -> str:
    """The response is ``{"detail": <one human sentence>, "code": code}`` with ``status``; returns detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"detail", "code"}, body
    assert body["code"] == code, body
    detail = body["detail"]
    assert isinstance(detail, str)
    # A sentence for people: capitalised, with words, ending in a full stop; no stack traces or reprs.
    assert detail[:1].isupper() and " " in detail and detail.endswith("."), detail
    assert "Traceback" not in detail and "Error(" not in detail, detail
    for fragment in fragments:
        assert fragment.lower() in detail.lower(), f"{fragment!r} not in {detail!r}"
    return detail


def assert_unauthorized(response: httpx.Response, *fragments: str) -> str:
    detail = assert_error(response, 401, "unauthorized", *fragments)
    assert response.headers.get("www-authenticate") == "Bearer"
    return detail


def assert_forbidden(response: httpx.Response, *fragments: str) -> str:
    detail = assert_error(response, 403, "forbidden", *fragments)
    assert "www-authenticate" not in response.headers  # authenticated, just not allowed
    return detail


# --- hand-made tokens -------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def claims_now(sub: str = "alice", ttl: int = 3600, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    payload: dict[str, Any] = {"sub": sub, "iat": now, "exp": now + ttl, **extra}
    return {k: v for k, v in payload.items() if v is not None}


def unsigned_token(header: dict[str, Any], payload: dict[str, Any], signature: str = "") -> str:
    """``header.payload.signature`` assembled by hand, without any JWT library."""
    return f"{b64json(header)}.{b64json(payload)}.{signature}"


def hmac_by_hand(header: dict[str, Any], payload: dict[str, Any], secret: bytes, alg: str = "HS256") -> str:
    """An HMAC token with any bytes as secret (PyJWT refuses PEM keys as HMAC secrets)."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    signing_input = f"{b64json(header)}.{b64json(payload)}"
    mac = hmac.new(secret, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64url(mac)}"


# --- identity provider keys -------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str  # RS256 or ES256
    private: Any

    def jwk(self, **extra: Any) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.alg == "RS256" else ECAlgorithm
        data: dict[str, Any] = algorithm.to_jwk(self.private.public_key(), as_dict=True)
        return {**data, "kid": self.kid, "use": "sig", "alg": self.alg, **extra}

    def token(
        self, sub: str = "idp-user", *, kid: str | None = "<own>", alg: str | None = None, **claims: Any
    ) -> str:
        payload = claims_now(sub, **{"iss": ISSUER, "aud": AUDIENCE, **claims})
        chosen_kid = self.kid if kid == "<own>" else kid
        headers = {"kid": chosen_kid} if chosen_kid is not None else None
        return jwt.encode(payload, self.private, algorithm=alg or self.alg, headers=headers)


@dataclass(frozen=True)
class IdpKeys:
    rsa: SigningKey
    ec: SigningKey
    rsa_next: SigningKey  # the provider's next key, for rotation
    foreign_rsa: SigningKey  # somebody else's key that claims the provider's kid


@pytest.fixture(scope="session")
def idp_keys() -> IdpKeys:
    def rsa_key() -> Any:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    return IdpKeys(
        rsa=SigningKey("rsa-1", "RS256", rsa_key()),
        ec=SigningKey("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1())),
        rsa_next=SigningKey("rsa-2", "RS256", rsa_key()),
        foreign_rsa=SigningKey("rsa-1", "RS256", rsa_key()),
    )


# --- a real JWKS endpoint ---------------------------------------------------------------------------


class JwksServer:
    """A threaded HTTP server on 127.0.0.1 serving a JWKS document that tests can change.

    ``mode``: ``"ok"`` serves ``document`` as JSON, ``"http_error"`` answers 503, ``"not_json"`` answers
    200 with an HTML page. ``delay`` (seconds) makes every answer slow. ``hits`` counts the requests for
    the JWKS path.
    """

    def __init__(self) -> None:
        self.document: Any = {"keys": []}
        self.mode = "ok"
        self.delay = 0.0
        self.hits = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_port}{JWKS_PATH}"
        self._thread: threading.Thread | None = None

    def publish(self, *keys: dict[str, Any]) -> None:
        with self._lock:
            self.document = {"keys": list(keys)}

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Shut down and close the socket: later connections are refused."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def _respond(self) -> tuple[int, str, bytes]:
        with self._lock:
            self.hits += 1
            mode, document, delay = self.mode, self.document, self.delay
        if delay:
            time.sleep(delay)  # in the server's own thread: a slow provider, the app's loop stays free
        if mode == "http_error":
            return 503, "application/json", b'{"error": "temporarily_unavailable"}'
        if mode == "not_json":
            return 200, "text/html", b"<html><body>Down for maintenance</body></html>"
        return 200, "application/json", json.dumps(document).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != JWKS_PATH:
                    status, content_type, body = 404, "text/plain", b"not found"
                else:
                    status, content_type, body = server._respond()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def jwks_server(idp_keys: IdpKeys) -> Iterator[JwksServer]:
    server = JwksServer()
    server.publish(idp_keys.rsa.jwk(), idp_keys.ec.jwk())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A URL on a loopback port that is bound but not listening: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{JWKS_PATH}"


IdpClientFactory = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def idp_client(
    tmp_path: Path, db_url: str, database: Database, jwks_server: JwksServer
) -> AsyncIterator[IdpClientFactory]:
    """Builds apps that trust the JWKS server (or ``jwks_url``) and returns HTTP clients for them."""
    clients: list[httpx.AsyncClient] = []

    async def make(
        *,
        cooldown: float = 3600.0,
        cache_seconds: float = 300.0,
        jwks_url: str | None = None,
        **overrides: Any,
    ) -> httpx.AsyncClient:
        values: dict[str, Any] = {
            "data_dir": tmp_path / f"idp-{len(clients)}",
            "database_url": db_url,
            "auth_jwt_secret": None,
            "auth_jwks_url": jwks_url or jwks_server.url,
            "auth_issuer": ISSUER,
            "auth_audience": AUDIENCE,
            "auth_jwks_refetch_cooldown": cooldown,
            "auth_jwks_cache_seconds": cache_seconds,
            "admin_subjects": ["root-admin"],
            "log_json": False,
        }
        settings = Settings(**{**values, **overrides})
        app = create_app(settings, database=database)
        # Unexpected errors arrive as the 500 response a real server would send, not as exceptions.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://parley.test")
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            await client.aclose()
