"""The console's evaluation-run page, the test conversation in place, and a history of 10,000 calls, in
headless Chromium through the real stack (uvicorn on a migrated SQLite or PostgreSQL database, the demo
seeded against the real order connector over HTTP, evaluation runs worked by the app's own job queue)."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import create_async_engine
from ulid import ULID

from parley.app import create_app
from parley.calls.models import Call
from parley.config import Settings, prepare_settings
from parley.demo.seed import run_seed
from tests.conftest import JWT_SECRET, make_token
from tests.console.test_console import _check, expected_problems, sign_in
from tests.live import serve_in_thread
from tests.playground.browser import require_browser

TIMEOUT_MS = 60_000
HISTORY = 10_000

# Two scenarios for the English order agent: one passes, one expects a word the agent never says.
SCENARIOS = [
    {
        "name": "greets and asks for the order number",
        "turns": [],
        "expect": {"opening": [{"contains": "order number"}]},
    },
    {
        "name": "says banana after an order number",
        "turns": [{"say": "1 5", "expect": [{"contains": "banana"}]}],
    },
]


def _wait_for_run(base: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:  # the app's job queue works the run beside the server; poll its state
        run = _check(httpx.get(f"{base}/api/evaluations/runs/{run_id}", headers=headers))
        if run["status"] in ("completed", "cancelled"):
            return dict(run)
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


async def _seed_history(url: str, org: str, flow: str, count: int) -> None:
    """``count`` ended calls in one bulk insert, one a minute back from now, ids ordered by start."""
    now = datetime.now(UTC)
    rows = []
    for n in range(count):
        started = now - timedelta(minutes=n + 10)
        rows.append(
            {
                "id": f"call_{ULID.from_datetime(started)}",
                "organization_id": org,
                "session_id": f"seeded-{n}",
                "flow_id": flow,
                "flow_version": 1,
                "channel": "phone",
                "direction": "inbound",
                "caller": f"+4930{n:07d}",
                "started_at": started,
                "ended_at": started + timedelta(seconds=42),
                "duration_seconds": 42.0,
                "outcome": "completed" if n % 5 else "abandoned",
                "transcript": [],
                "tool_calls": [],
                "turn_metrics": [],
                "variables": {},
                "turn_count": 2,
                "llm_prompt_tokens": 0,
                "llm_completion_tokens": 0,
                "tts_characters": 0,
                "stt_seconds": 0.0,
                "has_signals": False,
                "signal_types": [],
                "created_at": now,
                "updated_at": now,
            }
        )
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(insert(Call), rows)
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, connector: dict[str, str]
) -> Iterator[dict[str, Any]]:
    settings = prepare_settings(
        Settings(
            data_dir=tmp_path_factory.mktemp("console_runs"),
            database_url=database_url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            rate_limit_per_minute=0,
            outbound_allowlist=["127.0.0.1"],
            log_level="WARNING",
            log_json=False,
        )
    )
    seeded = asyncio.run(
        run_seed(
            settings,
            owner_subject="shop-owner",
            connector_url=connector["url"],
            connector_key=connector["key"],
        )
    )
    org = seeded.organization_id
    flow = seeded.flow_ids["en"]
    asyncio.run(_seed_history(database_url, org, flow, HISTORY))
    with serve_in_thread(create_app(settings)) as base:
        token = make_token("shop-owner", ttl=3600)
        headers = {"Authorization": f"Bearer {token}", "X-Organization-Id": org}
        dataset = _check(httpx.post(f"{base}/api/datasets", json={"name": "Console check"}, headers=headers))
        _check(
            httpx.put(
                f"{base}/api/evaluations/suites/{dataset['id']}", json={"flow_id": flow}, headers=headers
            )
        )
        _check(
            httpx.post(
                f"{base}/api/datasets/{dataset['id']}/items",
                json={"items": [{"data": s} for s in SCENARIOS]},
                headers=headers,
            )
        )
        created = _check(
            httpx.post(
                f"{base}/api/evaluations/runs",
                json={"suite": dataset["id"], "flow_id": flow},
                headers=headers,
            )
        )
        run = _wait_for_run(base, headers, created["id"])
        yield {
            "url": base,
            "token": token,
            "headers": headers,
            "org": org,
            "flow": flow,
            "run": run,
            "database_url": database_url,
        }


@pytest.fixture(scope="module")
def browser(platform: dict[str, Any]) -> Iterator[Any]:
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=["--autoplay-policy=no-user-gesture-required"]
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("PARLEY_CONSOLE_SCREENSHOTS")
    return Path(folder) if folder else tmp_path_factory.mktemp("console-screenshots-runs")


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.problems = problems
    try:
        yield page
    finally:
        context.close()


def test_a_run_shows_its_scenarios_and_highlights_the_failed_expectation(
    page: Any, platform: dict[str, Any], shots: Path
) -> None:
    run = platform["run"]
    assert run["counts"]["passed"] == 1 and run["counts"]["failed"] == 1, run
    sign_in(page, platform)
    page.get_by_role("link", name="Evaluation runs").click()
    # the runs list links to the run
    page.locator(f"tr[data-run-id='{run['id']}'] a").click()
    page.get_by_role("heading", level=1, name=re.compile("Console check")).wait_for()
    assert page.url.endswith(f"#/evaluations/{run['id']}")
    assert (
        page.get_by_role("link", name="Evaluation runs", exact=True).get_attribute("aria-current") == "page"
    )
    passed = page.locator("details.scenario[data-status='passed']")
    failed = page.locator("details.scenario[data-status='failed']")
    failed.wait_for()
    assert passed.count() == 1 and failed.count() == 1
    assert "greets and asks" in str(passed.text_content())
    # the failure is open by itself; the passed scenario is folded
    assert failed.get_attribute("open") is not None and passed.get_attribute("open") is None
    # the reply to turn 1 is marked, and the failed expectation beside it says expected vs. actual
    turn = failed.locator("li.failed-turn")
    assert turn.count() == 1 and turn.get_attribute("data-turn") == "1"
    box = turn.locator(".failure")
    assert box.is_visible()
    assert "banana" in str(box.locator("dd.expected").text_content())
    actual = str(box.locator("dd.actual").text_content())
    assert actual and "banana" not in actual.lower()
    assert actual.strip() in str(turn.locator("p").first.text_content())
    # the marking is tied to the turn for assistive technology, and styled apart from the other turns
    assert turn.get_attribute("aria-describedby") == box.get_attribute("id")
    colour = page.evaluate("(el) => getComputedStyle(el).outlineStyle", turn.element_handle())
    assert colour == "solid"
    assert failed.locator("li.agent:not(.failed-turn)").count() == 1  # the opening was fine
    page.screenshot(path=str(shots / "08-evaluation-run.png"), full_page=True)
    # the keyboard opens a folded scenario
    passed.locator("summary").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector(\"details.scenario[data-status='passed']\").open")
    # only the failures, when asked
    page.locator("#r-status").select_option("failed")
    page.locator(".list-status", has_text="1 shown").wait_for()
    assert page.locator("details.scenario").count() == 1
    assert not expected_problems(page), page.problems


def test_an_unknown_run_is_explained(page: Any, platform: dict[str, Any]) -> None:
    sign_in(page, platform)
    page.goto(f"{platform['url']}/console#/evaluations/run_01JD0000000000000000000000")
    page.locator(".message.error", has_text="Not found").wait_for()


def test_the_draft_and_the_published_version_are_tried_in_place_with_tools_and_latency(
    page: Any, platform: dict[str, Any], shots: Path
) -> None:
    base, headers, flow = platform["url"], platform["headers"], platform["flow"]
    current = _check(httpx.get(f"{base}/api/flows/{flow}", headers=headers))
    definition = current["definition"]
    start = next(n for n in definition["nodes"] if n["id"] == definition["start_node"])
    assert isinstance(start.get("text"), str), start
    start["text"] = "Draft greeting. " + start["text"]
    _check(httpx.patch(f"{base}/api/flows/{flow}", json={"definition": definition}, headers=headers))
    sign_in(page, platform)
    page.goto(f"{base}/console#/flows/{flow}")
    chat = page.locator("ol.chat")
    # the published version does not know the draft's greeting
    page.locator("#test-target").select_option("published")
    page.get_by_role("button", name="Start conversation").click()
    chat.locator("li.agent").first.wait_for()
    assert "Draft greeting" not in str(chat.locator("li.agent").first.text_content())
    page.get_by_role("button", name="End", exact=True).click()
    page.get_by_text("The conversation has ended").wait_for()
    # the draft does, and its tool call shows arguments and result, each turn its latency
    page.locator("#test-target").select_option("draft")
    page.get_by_role("button", name="Start conversation").click()
    chat.locator("li.agent", has_text="Draft greeting").wait_for()
    page.get_by_text("The conversation with the draft is running.").wait_for()
    page.get_by_label("What the caller says").fill("1 5")
    page.get_by_role("button", name="Send").click()
    tool = page.locator(".test-tools article.tool").first
    tool.wait_for()
    assert "15" in str(tool.locator("pre.tool-arguments").text_content())
    result = str(tool.locator("pre.tool-result").text_content())
    assert result not in ("", "–") and "{" in result
    rows = page.locator("table.test-metrics tbody tr")
    assert rows.count() == 2
    assert all(float(str(rows.nth(i).get_attribute("data-answer-ms"))) > 0 for i in range(2))
    assert rows.nth(1).locator("td").nth(4).text_content() != "–"  # the tool's time in the second turn
    page.screenshot(path=str(shots / "09-try-the-draft.png"), full_page=True)
    page.get_by_role("button", name="End", exact=True).click()
    page.get_by_text("The conversation has ended").wait_for()
    assert not expected_problems(page), page.problems


def test_ten_thousand_calls_are_paged_and_the_api_answers_every_page(
    page: Any, platform: dict[str, Any]
) -> None:
    base, headers = platform["url"], platform["headers"]
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/calls/history" in r.url else None)
    sign_in(page, platform)
    page.goto(f"{base}/console#/calls")
    page.locator(".list-status", has_text="50 shown; more are available.").wait_for()
    assert page.locator("table.calls tbody tr").count() == 50
    page.get_by_role("button", name="Load more").click()
    page.locator(".list-status", has_text="100 shown; more are available.").wait_for()
    assert page.locator("table.calls tbody tr").count() == 100
    assert len(requests) == 2 and all("limit=50" in url for url in requests) and "cursor=" in requests[1]
    shown = page.evaluate(
        "() => [...document.querySelectorAll('table.calls tbody tr')].map((r) => r.dataset.callId)"
    )
    # the API's keyset pages, followed to the end: every call once, newest first, the console's first pages
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["cursor"] = cursor
        # A generous time-out: the machine running the suite may be loaded (this is not a speed test).
        page_of = httpx.get(
            f"{base}/api/monitoring/calls/history", params=params, headers=headers, timeout=120
        )
        body = _check(page_of)
        pages += 1
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert len(seen) >= HISTORY and len(set(seen)) == len(seen) and pages >= HISTORY // 200
    assert seen == sorted(seen, reverse=True)
    assert shown == seen[:100]
    assert not expected_problems(page), page.problems


def test_a_recording_not_yet_in_storage_is_explained_with_a_retry(
    page: Any, platform: dict[str, Any]
) -> None:
    base = platform["url"]
    started = datetime.now(UTC) - timedelta(minutes=1)
    call_id = f"call_{ULID.from_datetime(started)}"
    row = {
        "id": call_id, "organization_id": platform["org"], "session_id": "being-written",
        "flow_id": platform["flow"], "flow_version": 1, "channel": "phone", "direction": "inbound",
        "started_at": started, "ended_at": started + timedelta(seconds=30), "duration_seconds": 30.0,
        "outcome": "completed", "transcript": [], "tool_calls": [], "turn_metrics": [], "variables": {},
        "turn_count": 1, "llm_prompt_tokens": 0, "llm_completion_tokens": 0, "tts_characters": 0,
        "stt_seconds": 0.0, "has_signals": False, "signal_types": [],
        "recording_filename": f"{call_id}.wav", "created_at": started, "updated_at": started,
    }  # fmt: skip

    async def add() -> None:
        engine = create_async_engine(database_url_of(platform))
        try:
            async with engine.begin() as connection:
                await connection.execute(insert(Call), [row])
        finally:
            await engine.dispose()

    # playwright keeps its own event loop on this thread: the insert runs on another one
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, add()).result()
    call = _check(httpx.get(f"{base}/api/calls/{call_id}", headers=platform["headers"]))
    assert call["recording_url"]
    sign_in(page, platform)
    page.goto(f"{base}/console#/calls/{call_id}")
    problem = page.locator("#recording-problem", has_text="still being written")
    problem.wait_for()
    problem.get_by_role("button", name="Try again").click()
    page.locator("#recording-problem", has_text="still being written").wait_for()


def database_url_of(platform: dict[str, Any]) -> str:
    return str(platform["database_url"])
