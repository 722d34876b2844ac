from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.integrations.conftest import PUBLIC_URL, Provider

CALLBACK = "/api/integrations/oauth/callback"


async def put_client(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    provider: Provider,
    key: str = "acme",
    **overrides: Any,
) -> dict[str, Any]:
    response = await client.put(
        f"/api/integrations/{key}/client", json=provider.client_body(**overrides), headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def connect(
    client: httpx.AsyncClient, headers: dict[str, str], key: str = "acme", body: dict[str, Any] | None = None
) -> dict[str, Any]:
    response = await client.post(f"/api/integrations/{key}/connect", json=body or {}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def browse(authorization_url: str, public_url: str = PUBLIC_URL) -> str:
    """What the person's browser does: open the authorization URL, get redirected back to us."""
    async with httpx.AsyncClient() as browser:
        response = await browser.get(authorization_url)
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(public_url + CALLBACK), location
    return location[len(public_url) :]


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


async def connect_fully(
    client: httpx.AsyncClient, headers: dict[str, str], key: str = "acme", body: dict[str, Any] | None = None
) -> dict[str, Any]:
    started = await connect(client, headers, key, body)
    response = await client.get(await browse(started["authorization_url"]))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]
