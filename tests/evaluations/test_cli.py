"""`parley demo seed` ships the suite; `parley eval run` runs it as a subprocess against a live platform
(its own job workers, a migrated SQLite file, the real order connector)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.demo.flows import order_status_flow
from parley.demo.suite import SUITE_NAME
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, connector: dict[str, str]) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("eval-cli")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    environment.update(
        PARLEY_DATA_DIR=str(data_dir),
        PARLEY_AUTH_JWT_SECRET=JWT_SECRET,
        PARLEY_CONNECTOR_URL=connector["url"],
    )
    seeded = subprocess.run(
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
        check=False,
    )
    assert seeded.returncode == 0, seeded.stderr
    lines = dict(line.rsplit(" ", 1) for line in seeded.stdout.strip().splitlines())
    assert lines["suite"].startswith("ds_")
    settings = Settings(
        data_dir=data_dir,
        database_url=f"sqlite+aiosqlite:///{data_dir / 'parley.db'}",
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        connector_url=connector["url"],
        outbound_allowlist=["127.0.0.1"],
        log_level="WARNING",
        log_json=False,
    )
    with serve_in_thread(create_app(settings)) as url:
        token = make_token("shop-owner", ttl=3600)
        yield {
            "url": url,
            "token": token,
            "env": environment,
            "flow_de": lines["flow de"],
            "suite": lines["suite"],
        }


def _xml(path: Path) -> ET.Element:
    return ET.fromstring(path.read_bytes())  # noqa: S314 - our own output


def evaluate(shop: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**shop["env"], "PARLEY_TOKEN": shop["token"], "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-m", "parley", "eval", "run", *args, "--url", shop["url"]],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_the_demo_suite_passes_from_the_terminal(shop: dict[str, Any], tmp_path: Path) -> None:
    junit, report = tmp_path / "junit.xml", tmp_path / "run.json"
    done = evaluate(
        shop, "Auftragsstatus", "--suite", SUITE_NAME, "--junit", str(junit), "--json", str(report)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed: 10 passed, 0 failed, 0 error(s), 0 skipped of 10" in done.stdout
    assert "de: connector outage" in done.stdout and "en: caller does not answer" in done.stdout
    suite = _xml(junit).find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "10",
        "0",
        "0",
    )
    data = json.loads(report.read_text())
    assert data["run"]["passed"] is True and len(data["results"]) == 10


@pytest.mark.slow
def test_a_broken_version_fails_with_exit_1_and_names_the_scenarios(
    shop: dict[str, Any], tmp_path: Path
) -> None:
    headers = {"Authorization": f"Bearer {shop['token']}"}
    broken = order_status_flow("de")
    for node in broken["nodes"]:
        if node["id"] == "offer_callback":  # a regression: the callback question is gone
            node["prompt"] = "{% if language == 'en' %}Anything else?{% else %}Noch etwas?{% endif %}"
    flow = f"{shop['url']}/api/flows/{shop['flow_de']}"
    assert httpx.patch(flow, json={"definition": broken}, headers=headers).status_code == 200
    published = httpx.post(f"{flow}/publish", headers=headers)
    assert published.status_code == 200, published.text
    junit = tmp_path / "junit.xml"
    version = str(published.json()["version"])
    done = evaluate(
        shop, shop["flow_de"], "--suite", shop["suite"], "--version", version, "--junit", str(junit)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "completed: 6 passed, 4 failed" in done.stdout  # both known-order scenarios miss the question
    root = _xml(junit)
    failed = sorted(
        case.get("name") or "" for case in root.iter("testcase") if case.find("failure") is not None
    )
    assert failed == [
        "de: known order with a callback",
        "de: known order, no callback",
        "en: known order with a callback",
        "en: known order, no callback",
    ]
    missing = evaluate(shop, "No such flow", "--suite", SUITE_NAME)
    assert missing.returncode == 2 and "No flow named 'No such flow'." in missing.stderr
    no_suite = evaluate(shop, "Auftragsstatus", "--suite", "Nope")
    assert no_suite.returncode == 2 and "No test suite named 'Nope'" in no_suite.stderr


def test_voice_mode_from_the_terminal(shop: dict[str, Any], tmp_path: Path) -> None:
    report = tmp_path / "voice.json"
    done = evaluate(shop, "Order status", "--suite", SUITE_NAME, "--voice", "--json", str(report))
    # Voice mode skips the German scenarios (the offline German recognizer is experimental), and a
    # run with skipped scenarios does not pass.
    assert done.returncode == 1, done.stdout + done.stderr
    assert "voice: words heard as said" in done.stdout and "heard ok" in done.stdout
    data = json.loads(report.read_text())
    assert data["run"]["mode"] == "voice" and data["run"]["counts"]["pending"] == 0
    skipped = {r["name"] for r in data["results"] if r["status"] == "skipped"}
    assert skipped == {r["name"] for r in data["results"] if r["name"].startswith("de: ")}
    assert len(skipped) >= 1
