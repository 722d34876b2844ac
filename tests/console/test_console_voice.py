"""The voice test in place: the console's flow page talks to the flow with Chromium's fake microphone,
through the same voice.js as the playground (offline engines, the demo seeded against the real order
connector). The spoken order number must reach the connector, and the page must show the caller's
words, the agent's answer, the tool call with its arguments and result and the turn's voice latency."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.app import create_app
from parley.config import Settings, prepare_settings
from parley.demo.seed import run_seed
from parley.voice.audio import write_wav
from tests.conftest import JWT_SECRET, make_token
from tests.console.test_console import sign_in
from tests.live import serve_in_thread
from tests.playground.browser import require_browser
from tests.playground.test_browser import RATE, SPOKEN_ORDER, _speech, _waits_for_the_question, launch, order

pytestmark = pytest.mark.realtime
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, connector: dict[str, str]
) -> Iterator[dict[str, Any]]:
    settings = prepare_settings(
        Settings(
            data_dir=tmp_path_factory.mktemp("console_voice"),
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
    with serve_in_thread(create_app(settings)) as base:
        yield {
            "url": base,
            "token": make_token("shop-owner", ttl=3600),
            "org": seeded.organization_id,
            "flow": seeded.flow_ids["en"],
        }


@pytest.fixture(scope="module")
def caller_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Silence through the greeting, the order number, then silence (the file plays once)."""
    speech = asyncio.run(_speech(SPOKEN_ORDER[0]))
    path = tmp_path_factory.mktemp("console_wav") / "order.wav"
    path.write_bytes(write_wav(_waits_for_the_question() + speech + bytes(RATE * 2 * 20), RATE))
    return path


@pytest.fixture(scope="module")
def browser(platform: dict[str, Any], caller_wav: Path) -> Iterator[Any]:
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright, executable, caller_wav)
        try:
            yield browser
        finally:
            browser.close()


def test_a_spoken_order_number_in_the_console(
    browser: Any, platform: dict[str, Any], connector: dict[str, str]
) -> None:
    spoken, number = SPOKEN_ORDER
    expected = order(connector, number)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-GB")
    context.grant_permissions(["microphone"], origin=platform["url"])
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.problems = problems
    try:
        sign_in(page, platform)
        page.goto(f"{platform['url']}/console#/flows/{platform['flow']}")
        page.locator("#test-target").select_option("published")
        page.locator("#test-mode").select_option("voice")
        page.get_by_role("button", name="Start conversation").click()
        chat = page.locator("ol.chat")
        chat.locator("li.caller").first.wait_for()
        assert spoken in str(chat.locator("li.caller").first.text_content())
        # the connector answered: the agent names that order's car
        chat.locator("li.agent", has_text=str(expected["model_name"])).wait_for()
        tool = page.locator(".test-tools article.tool").first
        tool.wait_for()
        assert number in str(tool.locator("pre.tool-arguments").text_content())
        assert str(expected["model_name"]) in str(tool.locator("pre.tool-result").text_content())
        # the answer was played, and the spoken turn has its voice-to-voice latency
        page.wait_for_function("() => Number(document.getElementById('test-played').dataset.ms) > 1000")
        voiced = page.locator(
            "table.test-metrics tbody tr[data-voice-to-voice]:not([data-voice-to-voice=''])"
        )
        voiced.first.wait_for()
        assert float(str(voiced.first.get_attribute("data-voice-to-voice"))) > 0
        # the microphone mutes without hanging up; End ends the session through the audio connection
        page.get_by_role("button", name="Stop microphone").click()
        page.locator("#test-state", has_text="Microphone off").wait_for()
        page.get_by_role("button", name="End", exact=True).click()
        page.get_by_text("The conversation has ended").wait_for()
        assert not problems, problems
    finally:
        context.close()
