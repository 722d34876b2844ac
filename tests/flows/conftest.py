from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org

ORDER_KEY = "ck_live_very_secret_9876"


@pytest.fixture
async def org(client: httpx.AsyncClient) -> str:
    return str((await create_org(client))["id"])


@pytest.fixture
def headers(org: str) -> dict[str, str]:
    return auth(ALICE, org)


@pytest.fixture
async def order_tool(client: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, Any]:
    response = await client.post(
        "/api/tools",
        json={"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": ORDER_KEY}},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]
