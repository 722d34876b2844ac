from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from parley.config import Settings
from tests.conftest import auth
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.oauth2 import OAuth2Stub, StubClient, build_app

PUBLIC_URL = "http://parley.test"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The OAuth2 stub listens on loopback, which outbound calls may reach only when allow-listed."""
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.outbound_timeout = 5.0
    settings.public_url = PUBLIC_URL
    settings.integrations_return_to_allowlist = ["https://app.example.com"]
    return settings


@dataclass
class Provider:
    stub: OAuth2Stub
    url: str
    client: StubClient

    def client_body(self, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "client_id": self.client.client_id,
            "client_secret": self.client.client_secret,
            "authorize_url": f"{self.url}/authorize",
            "token_url": f"{self.url}/token",
            "revocation_url": f"{self.url}/revoke",
            "scopes": ["calendar.read", "offline_access"],
            "token_auth_method": self.client.auth_method,
        }
        body.update(overrides)
        return {k: v for k, v in body.items() if v is not None}


_STUB = OAuth2Stub()


@pytest.fixture(scope="session")
def oauth_server() -> Iterator[str]:
    with serve_in_thread(build_app(_STUB)) as url:
        yield url


@pytest.fixture
def provider(oauth_server: str) -> Provider:
    _STUB.reset()
    client = _STUB.register(StubClient("parley-client", "s3cret-client-secret-value"))
    return Provider(_STUB, oauth_server, client)


async def admin_headers(client: httpx.AsyncClient) -> dict[str, str]:
    org = await create_org(client)
    return auth(ALICE, str(org["id"]))
