"""Without the allow-list, provider checks may not reach loopback or private addresses."""

from __future__ import annotations

import httpx

from parley.config import Settings
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org
from tests.providers import stubs


async def test_loopback_base_url_is_refused_without_allowlist(
    client: httpx.AsyncClient, settings: Settings, stub_url: str
) -> None:
    settings.outbound_allowlist = []  # the app reads its settings object at call time
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    response = await client.put(
        "/api/providers/openai/config",
        json={"api_key": stubs.OPENAI_KEY, "base_url": f"{stub_url}/v1"},
        headers=headers,
    )
    assert response.status_code == 200
    result = (await client.post("/api/providers/openai/test", headers=headers)).json()
    assert result["ok"] is False
    assert "non-public address" in result["detail"]

    response = await client.put(
        "/api/providers/smtp/config",
        json={"host": "127.0.0.1", "port": 25, "from_address": "a@example.com"},
        headers=headers,
    )
    assert response.status_code == 200
    result = (await client.post("/api/providers/smtp/test", headers=headers)).json()
    assert result["ok"] is False
    assert "non-public address" in result["detail"]
