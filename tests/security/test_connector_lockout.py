"""One tenant's wrong connector key cannot lock another tenant out of order lookups (issue 18, item 4).

The platform, the real connector (default failure limit: 30 a minute) and both tenants' tools all run
for real; every lookup reaches the connector from the same address, 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import httpx
import pytest

from parley.app import create_app
from parley.connector import setup
from parley.connector.app import create_connector_app
from parley.connector.config import ConnectorSettings
from tests.live import serve_in_thread
from tests.security.conftest import live_settings, new_org


@pytest.fixture(scope="module")
def order_connector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("lockout-connector")
    settings = ConnectorSettings(data_dir=tmp, database_url=f"sqlite+aiosqlite:///{tmp / 'connector.db'}")
    assert settings.auth_failure_limit == 30  # the shipped default
    setup.upgrade_database(settings)
    asyncio.run(setup.write_demo_orders(settings, 5, seed=3, reference=date(2025, 6, 2)))
    key = setup.create_key(settings, "shared-platform")
    with serve_in_thread(create_connector_app(settings)) as url:
        yield {"url": url, "key": key}


@pytest.fixture(scope="module")
def platform(
    fresh_db: str, order_connector: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    settings = live_settings(
        tmp_path_factory.mktemp("lockout"), fresh_db, connector_url=order_connector["url"]
    )
    with serve_in_thread(create_app(settings)) as url:
        yield url


def _order_tool(http: httpx.Client, headers: dict[str, str], key: str) -> str:
    body = {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": key}}
    response = http.post("/api/tools", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_wrong_keys_of_one_tenant_do_not_lock_out_another(
    platform: str, order_connector: dict[str, str]
) -> None:
    key = order_connector["key"]
    # The worst case: the wrong key names the very key id the other tenant uses.
    wrong = f"pcn_{key.split('_')[1]}_not-the-right-secret"
    with httpx.Client(base_url=platform, timeout=60) as http:
        mallory = new_org(http, "lock-mallory", "Mallory GmbH")
        carol = new_org(http, "lock-carol", "Carol KG")
        bad_tool = _order_tool(http, mallory, wrong)
        good_tool = _order_tool(http, carol, key)
        statuses = []
        for _ in range(32):
            report = http.post(
                f"/api/tools/{bad_tool}/test", json={"arguments": {"order_id": "1"}}, headers=mallory
            )
            assert report.status_code == 200, report.text
            statuses.append(report.json()["http_status"])
        assert statuses[:30] == [401] * 30
        assert statuses[30:] == [429, 429]  # Mallory's own attempts are now refused

        for order_id in ("1", "2", "3"):
            found = http.post(
                f"/api/tools/{good_tool}/test", json={"arguments": {"order_id": order_id}}, headers=carol
            ).json()
            assert (found["status"], found["http_status"]) == ("ok", 200), found
            assert found["result"]["order"]["id"] == int(order_id)
