"""`parley demo seed`: the demo organization, its tool and the published agents, idempotently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.conftest import JWT_SECRET, auth, make_token


def _seed(data_dir: Path, connector: dict[str, str]) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    environment.update(
        {
            "PARLEY_DATA_DIR": str(data_dir),
            "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
            "PARLEY_CONNECTOR_URL": connector["url"],
        }
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "parley",
            "demo",
            "seed",
            "--owner",
            "shop-owner",
            "--connector-key",
            connector["key"],
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    return lines


@pytest.mark.slow
async def test_seed_is_idempotent_and_the_agent_can_look_up_orders(
    tmp_path: Path, connector: dict[str, Any]
) -> None:
    first = _seed(tmp_path, connector)
    second = _seed(tmp_path, connector)
    assert first == second
    assert first["organization"].startswith("org_") and first["tool"].startswith("tool_")

    url = f"sqlite+aiosqlite:///{tmp_path / 'parley.db'}"
    database = Database.from_url(url)
    settings = Settings(
        data_dir=tmp_path, database_url=url, auth_jwt_secret=JWT_SECRET, connector_url=connector["url"]
    )  # type: ignore[arg-type]
    app = create_app(settings, database=database)
    headers = auth(make_token("shop-owner"))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            flows = (await client.get("/api/flows", headers=headers)).json()["items"]
            assert sorted((f["name"], f["latest_version"]) for f in flows) == [
                ("Auftragsstatus", 1),
                ("Order status", 1),
            ]
            tool = (await client.get(f"/api/tools/{first['tool']}", headers=headers)).json()
            assert connector["key"] not in str(tool)
            tested = await client.post(
                f"/api/tools/{first['tool']}/test", json={"arguments": {"order_id": 1}}, headers=headers
            )
            assert tested.status_code == 200, tested.text
            assert tested.json()["status"] == "ok"
            assert tested.json()["result"]["success"] is True
    finally:
        await database.dispose()
