"""The operator console end to end in headless Chromium, through the real stack.

The platform runs under uvicorn on a migrated SQLite or PostgreSQL database with the demo organization
seeded against the real order connector over HTTP. Calls are made through the API first: typed
conversations, and one voiced call over the audio WebSocket with the offline engines (eSpeak NG speaks
the order number, PocketSphinx hears it), so it has a stereo recording. One typed call is moved to
yesterday in the database, as a call made yesterday would be. Screenshots land in
``<pytest tmp>/console-screenshots*/`` for a person to look at.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import time
import wave
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from parley.app import create_app
from parley.calls.models import Call
from parley.config import Settings, prepare_settings
from parley.demo.seed import run_seed
from parley.voice.engines.espeak import EspeakTts
from tests import migrated, pg
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.playground.browser import require_browser

TIMEOUT_MS = 60_000
RATE = 16000
SILENCE = bytes(640)


# The server runs in a thread of this process, beside in-process recognizers that hold the GIL while
# they load: on a loaded machine an answer can take longer than httpx's default 5 s without being wrong.
SLOW_MACHINE_S = 60.0


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path_factory.mktemp("console_db") / "parley.db")
        return
    name, url = migrated.postgres("parley_console")
    try:
        yield url
    finally:
        pg.drop_database(name)


def _check(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json()


def typed_call(base: str, headers: dict[str, str], flow: str, lines: list[str]) -> str:
    # one client for the call's requests: each httpx.post builds a client (and an SSL context) of its own
    with httpx.Client(base_url=base, headers=headers, timeout=SLOW_MACHINE_S) as client:
        turn = _check(client.post("/api/sessions", json={"flow_id": flow, "channel": "web"}))
        for text in lines:
            turn = _check(client.post(f"/api/sessions/{turn['id']}/messages", json={"text": text}))
        if turn["status"] != "ended":
            _check(client.post(f"/api/sessions/{turn['id']}/end"))
    return str(turn["id"])


QUESTION = "Please tell me your order number."


async def _hear_the_question(ws: ClientConnection) -> None:
    """The line speaks the flow's opening as soon as it opens; a caller answers once the question has
    begun to play (an answer over a question not yet heard is asked again). So: the question's text,
    its audio, then the agent falls quiet (no audio for a second)."""
    asked = playing = False
    while True:
        try:
            message = await asyncio.wait_for(ws.recv(), 1 if playing else 60)
        except TimeoutError:
            if playing:
                return
            raise
        if isinstance(message, str):
            asked = asked or json.loads(message).get("text") == QUESTION
        elif asked:
            playing = True


async def _voiced_call(base: str, headers: dict[str, str], flow: str) -> str:
    """The caller says an order number over the audio WebSocket; the offline engines hear and answer."""
    chunks = [c async for c in EspeakTts("en-us").synthesize("one two", sample_rate=RATE)]
    speech = b"".join(chunks)
    async with httpx.AsyncClient(timeout=SLOW_MACHINE_S) as client:
        created = await client.post(
            f"{base}/api/sessions", json={"flow_id": flow, "channel": "web", "voiced": True}, headers=headers
        )
    session_id = str(created.json()["id"])
    url = base.replace("http://", "ws://") + f"/api/sessions/{session_id}/audio"
    async with connect(url, additional_headers=headers) as ws:
        await asyncio.wait_for(ws.recv(), 30)
        await _hear_the_question(ws)
        pcm = SILENCE * 15 + speech + SILENCE * 60
        for start in range(0, len(pcm), 640):
            await ws.send(pcm[start : start + 640])
        events: list[str] = []
        try:
            while True:  # until the agent has answered the order number; then the caller hangs up
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, str):
                    event = json.loads(message)
                    events.append(
                        event["type"]
                        if event["type"] not in ("error", "warning", "agent_text", "transcript")
                        else f"{event['type']}:{event.get('detail') or event.get('text')}"
                    )
                    if event["type"] == "metrics":
                        await ws.send(json.dumps({"type": "end"}))
                    if event["type"] == "end":
                        break
        except ConnectionClosed:
            pass
        assert "metrics" in events, str(events)  # the server closes the socket after "end" (1000)
    return session_id


def call_of_session(base: str, headers: dict[str, str], session_id: str, ready: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=base, headers=headers, timeout=SLOW_MACHINE_S) as client:
        while True:
            for item in _check(client.get("/api/calls", params={"limit": 200}))["items"]:
                call = _check(client.get(f"/api/calls/{item['id']}"))
                if call["session_id"] == session_id and ready(call):
                    return dict(call)
            assert time.monotonic() < deadline, f"no finished call record for {session_id}"
            time.sleep(0.2)


async def _move_to_yesterday(database_url: str, call: dict[str, Any]) -> None:
    day = timedelta(days=1)
    started = datetime.fromisoformat(call["started_at"]) - day
    ended = datetime.fromisoformat(call["ended_at"]) - day
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                update(Call).where(Call.id == call["id"]).values(started_at=started, ended_at=ended)
            )
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory, database_url: str, connector: dict[str, str]
) -> Iterator[dict[str, Any]]:
    settings = prepare_settings(
        Settings(
            data_dir=tmp_path_factory.mktemp("console"),
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
        token = make_token("shop-owner", ttl=3600)
        org = seeded.organization_id
        headers = {"Authorization": f"Bearer {token}", "X-Organization-Id": org}
        flow = seeded.flow_ids["en"]
        # calls: an order with a callback wish, an unknown order, and a voiced call with a recording
        # (no to the cost, yes to the call back)
        callback = typed_call(base, headers, flow, ["1 5", "no", "yes"])
        typed_call(base, headers, flow, ["1 6", "no"])
        voiced = asyncio.run(_voiced_call(base, headers, flow))
        voiced_call = call_of_session(base, headers, voiced, lambda c: c["recording_url"] is not None)
        yesterday = call_of_session(base, headers, callback, lambda c: True)
        asyncio.run(_move_to_yesterday(database_url, yesterday))
        # a second organization of the same person, and a viewer in the demo organization
        second = _check(
            httpx.post(
                f"{base}/api/organizations",
                json={"name": "Filiale Nord"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=SLOW_MACHINE_S,
            )
        )
        _check(
            httpx.post(
                f"{base}/api/organizations/{org}/members",
                json={"subject": "viewer-1", "name": "Vera Viewer", "role": "viewer"},
                headers=headers,
                timeout=SLOW_MACHINE_S,
            )
        )
        yield {
            "url": base,
            "token": token,
            "viewer": make_token("viewer-1", ttl=3600),
            "headers": headers,
            "org": org,
            "second_org": second["id"],
            "flow": flow,
            "flows": seeded.flow_ids,
            "voiced_call": voiced_call,
            "yesterday_call": yesterday,
        }


@pytest.fixture(scope="module")
def browser(platform: dict[str, Any]) -> Iterator[Any]:
    # platform runs asyncio.run first: sync playwright keeps its event loop on this thread
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
    folder = (
        Path(os.environ.get("PARLEY_CONSOLE_SCREENSHOTS", ""))
        if os.environ.get("PARLEY_CONSOLE_SCREENSHOTS")
        else None
    )
    return folder or tmp_path_factory.mktemp("console-screenshots")


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


def sign_in(page: Any, platform: dict[str, Any], token: str | None = None) -> None:
    page.goto(f"{platform['url']}/console")
    page.get_by_label("Token or API key").fill(token or platform["token"])
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation").wait_for()
    if page.get_by_label("Organization").is_enabled():  # a person in one organization has no choice
        page.get_by_label("Organization").select_option(platform["org"])
    page.get_by_role("heading", level=1).wait_for()


def expected_problems(page: Any) -> list[str]:
    # the browser itself logs failed fetches (401/403/404 answers the page explains) as console errors
    return [p for p in page.problems if "Failed to load resource" not in p]


@pytest.mark.slow
def test_the_console_is_served_with_a_strict_policy_and_stays_out_of_the_api_document(
    platform: dict[str, Any],
) -> None:
    response = httpx.get(f"{platform['url']}/console", timeout=SLOW_MACHINE_S)
    assert response.status_code == 200 and "text/html" in response.headers["content-type"]
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe-inline" not in policy
    assert (
        httpx.get(f"{platform['url']}/console/app.js", timeout=SLOW_MACHINE_S)
        .headers["content-type"]
        .startswith("text/javascript")
    )
    missing = httpx.get(f"{platform['url']}/console/secrets.txt", timeout=SLOW_MACHINE_S)
    assert missing.status_code == 404 and "no file" in missing.json()["detail"]
    paths = httpx.get(f"{platform['url']}/openapi.json", timeout=SLOW_MACHINE_S).json()["paths"]
    assert not [p for p in paths if p.startswith("/console")]


def test_a_wrong_token_is_explained_and_nothing_is_kept(page: Any, platform: dict[str, Any]) -> None:
    page.goto(f"{platform['url']}/console")
    page.get_by_label("Token or API key").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    page.locator("#signin-error", has_text="wrong or has expired").wait_for()
    assert page.evaluate("() => sessionStorage.length") == 0
    assert "not-a-token" not in page.url
    # an expired token is the same clear message
    page.get_by_label("Token or API key").fill(make_token("shop-owner", ttl=-60))
    page.get_by_role("button", name="Sign in").click()
    page.locator("#signin-error", has_text="wrong or has expired").wait_for()


def test_yesterdays_calls_a_call_with_transcript_recording_tools_and_latency(
    page: Any, platform: dict[str, Any], shots: Path
) -> None:
    sign_in(page, platform)
    page.get_by_role("link", name="Calls", exact=True).click()
    page.locator("table.calls tbody tr").first.wait_for()
    assert page.locator("table.calls tbody tr").count() == 3
    page.screenshot(path=str(shots / "01-calls.png"), full_page=True)
    page.get_by_label("Period").select_option("yesterday")
    page.get_by_role("button", name="Apply").click()
    page.locator(".list-status", has_text="1 shown").wait_for()
    row = page.locator("table.calls tbody tr")
    assert row.count() == 1 and row.first.get_attribute("data-call-id") == platform["yesterday_call"]["id"]
    assert "period=yesterday" in page.url
    # the overview answers "what happened yesterday, which need a callback, how fast"
    page.get_by_role("link", name="Overview").click()
    page.locator(".card", has_text="Calls yesterday").locator(".figure", has_text="1").wait_for()
    page.locator(".card", has_text="Open callback requests").locator(
        ".figure", has_text=re.compile(r"^[1-9]")
    ).wait_for()
    page.screenshot(path=str(shots / "00-overview.png"), full_page=True)

    voiced = platform["voiced_call"]
    page.goto(f"{platform['url']}/console#/calls/{voiced['id']}")
    page.get_by_role("heading", name="Transcript").wait_for()
    for turn in voiced["transcript"]:
        page.locator("ol.transcript li", has_text=turn["text"]).first.wait_for()
    # the recording came with the Authorization header and plays from a blob URL
    audio = page.locator("audio")
    audio.wait_for()
    assert str(audio.get_attribute("src")).startswith("blob:")
    page.screenshot(path=str(shots / "02-call.png"), full_page=True)
    # the browser decoded the WAV: it knows its length, the file's own (frames over rate). Not the
    # call's duration: that is wall-clock time, and the caller's audio here is sent faster than real
    # time, so the two differ by however long the machine took (3.01 s once under load).
    page.wait_for_function("() => document.querySelector('audio').readyState >= 1")
    duration = page.evaluate("() => document.querySelector('audio').duration")
    recording = httpx.get(
        f"{platform['url']}{voiced['recording_url']}", headers=platform["headers"], timeout=SLOW_MACHINE_S
    )
    assert recording.status_code == 200, recording.text
    with wave.open(io.BytesIO(recording.content)) as wav:
        length = wav.getnframes() / wav.getframerate()
    assert length > 1 and abs(duration - length) < 0.05, (duration, length)
    # tool calls with their arguments and results, latency per turn
    tool = page.locator("article.tool").first
    assert "order" in str(tool.text_content()).lower()
    # the arguments the call recorded (the offline recognizer hears eSpeak's "one two" as 12 most of
    # the time, and now and then with a digit more: docs/benchmarks.md, "Offline recognition")
    heard = str(voiced["tool_calls"][0]["arguments"]["order_id"])
    assert heard.isdigit() and heard in str(tool.locator("pre").first.text_content())
    metrics = page.locator("section", has=page.get_by_role("heading", name="Latency per turn")).locator(
        "tbody tr"
    )
    assert metrics.count() == len(voiced["turn_metrics"])
    assert page.locator("svg.hbars rect").count() == len(voiced["turn_metrics"])
    assert not expected_problems(page), page.problems


def test_a_signal_is_acknowledged_and_resolved_from_the_inbox(
    page: Any, platform: dict[str, Any], shots: Path
) -> None:
    sign_in(page, platform)
    page.get_by_role("link", name="Signals").click()
    row = page.locator("table.signals tbody tr", has_text="callback_requested").first
    row.wait_for()
    signal_id = row.get_attribute("data-signal-id")
    page.screenshot(path=str(shots / "03-signals.png"), full_page=True)
    row.get_by_role("button", name=re.compile("^Acknowledge")).click()
    row.locator(".badge", has_text="acknowledged").wait_for()
    page.locator("#announce", has_text="acknowledged").wait_for()
    stored = _check(
        httpx.get(f"{platform['url']}/api/brain/signals/{signal_id}", headers=platform["headers"])
    )
    assert stored["status"] == "acknowledged" and stored["acknowledged_by"]
    row.get_by_role("button", name=re.compile("^Resolve")).click()
    row.locator(".badge", has_text="resolved").wait_for()
    stored = _check(
        httpx.get(f"{platform['url']}/api/brain/signals/{signal_id}", headers=platform["headers"])
    )
    assert stored["status"] == "resolved"
    assert not expected_problems(page), page.problems


def test_switching_organization_shows_that_organizations_data(page: Any, platform: dict[str, Any]) -> None:
    sign_in(page, platform)
    page.get_by_role("link", name="Flows").click()
    page.locator("table.data tbody tr").first.wait_for()
    assert page.locator("table.data tbody tr").count() >= 1
    page.get_by_label("Organization").select_option(platform["second_org"])
    page.get_by_text("This organization has no flows yet.").wait_for()
    assert page.evaluate("() => sessionStorage.getItem('parley.console.org')") == platform["second_org"]
    page.get_by_label("Organization").select_option(platform["org"])
    page.locator("table.data tbody tr").first.wait_for()


def test_a_flow_is_drawn_validated_published_and_tried(
    page: Any, platform: dict[str, Any], shots: Path
) -> None:
    headers = platform["headers"]
    flow = platform["flow"]
    before = _check(httpx.get(f"{platform['url']}/api/flows/{flow}", headers=headers))
    # a change to the draft, so there is something to publish
    definition = before["definition"]
    node = next(n for n in definition["nodes"] if isinstance(n.get("text"), str))
    node["text"] += " Thank you."
    _check(
        httpx.patch(f"{platform['url']}/api/flows/{flow}", json={"definition": definition}, headers=headers)
    )
    full = _check(httpx.get(f"{platform['url']}/api/flows/{flow}/full", headers=headers))
    sign_in(page, platform)
    page.goto(f"{platform['url']}/console#/flows/{flow}")
    graph = page.locator("svg.flow-graph")
    graph.wait_for()
    assert graph.locator("g.node").count() == len(full["nodes"])
    assert graph.locator("path.edge").count() == len(full["edges"])
    page.get_by_role("button", name="Validate").click()
    page.locator(".message.ok", has_text="The draft is valid.").wait_for()
    versions_before = _check(httpx.get(f"{platform['url']}/api/flows/{flow}/versions", headers=headers))[
        "items"
    ]
    page.get_by_role("button", name="Publish").click()
    page.locator(".message.ok", has_text="Published as version").wait_for()
    versions = _check(httpx.get(f"{platform['url']}/api/flows/{flow}/versions", headers=headers))["items"]
    assert len(versions) == len(versions_before) + 1
    page.locator("tr", has_text=f"v{versions[0]['version']}").first.wait_for()
    # a typed conversation in place
    page.get_by_role("button", name="Start conversation").click()
    page.locator("ol.chat li.agent").first.wait_for()
    page.get_by_label("What the caller says").fill("1 5")
    page.get_by_role("button", name="Send").click()
    page.locator("ol.chat li.agent", has_text="know the cost").wait_for()
    page.screenshot(path=str(shots / "04-flow.png"), full_page=True)
    page.get_by_role("button", name="End", exact=True).click()
    page.get_by_text("The conversation has ended").wait_for()
    assert not expected_problems(page), page.problems


def test_a_viewer_who_publishes_is_told_why_not(page: Any, platform: dict[str, Any], shots: Path) -> None:
    sign_in(page, platform, platform["viewer"])
    page.goto(f"{platform['url']}/console#/flows/{platform['flow']}")
    page.locator("svg.flow-graph").wait_for()
    page.screenshot(path=str(shots / "05-viewer.png"), full_page=True)
    page.get_by_role("button", name="Publish").click()
    refusal = page.locator(".message.error", has_text="your role in this organization is viewer")
    refusal.wait_for()
    assert "403" not in str(refusal.text_content()) or "viewer" in str(refusal.text_content())
    page.screenshot(path=str(shots / "05-viewer-refused.png"), full_page=True)


def test_a_flow_deleted_in_another_tab_is_explained(page: Any, platform: dict[str, Any]) -> None:
    headers = platform["headers"]
    doomed = _check(
        httpx.post(
            f"{platform['url']}/api/flows",
            json={
                "name": "Doomed",
                "definition": {
                    "language": "en",
                    "start_node": "bye",
                    "nodes": [{"id": "bye", "type": "end", "text": "Bye."}],
                },
            },
            headers=headers,
        )
    )
    sign_in(page, platform)
    page.goto(f"{platform['url']}/console#/flows/{doomed['id']}")
    page.locator("svg.flow-graph").wait_for()
    _check(httpx.delete(f"{platform['url']}/api/flows/{doomed['id']}", headers=headers))
    page.get_by_role("button", name="Publish").click()
    page.locator(".message.error", has_text="deleted in another tab").wait_for()


@pytest.mark.slow
def test_a_long_history_is_paged_not_loaded(page: Any, platform: dict[str, Any]) -> None:
    """The history is read 50 at a time with the server's cursor; "Load more" fetches the next page, so
    10,000 calls cost one page of rows at a time."""
    for _ in range(50):  # with the three calls from before: more than one page
        typed_call(platform["url"], platform["headers"], platform["flow"], ["1 6", "no"])
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/calls/history" in r.url else None)
    sign_in(page, platform)
    page.goto(f"{platform['url']}/console#/calls")
    page.locator(".list-status", has_text="50 shown; more are available.").wait_for()
    assert page.locator("table.calls tbody tr").count() == 50
    page.get_by_role("button", name="Load more").click()
    page.locator(".list-status", has_text="that is all").wait_for()
    assert page.locator("table.calls tbody tr").count() >= 53
    assert page.get_by_role("button", name="Load more").is_hidden()
    assert len(requests) == 2 and all("limit=50" in url for url in requests)
    assert "cursor=" in requests[1]


def test_live_calls_can_be_ended(page: Any, platform: dict[str, Any]) -> None:
    headers = platform["headers"]
    turn = _check(
        httpx.post(
            f"{platform['url']}/api/sessions",
            json={"flow_id": platform["flow"], "channel": "web"},
            headers=headers,
        )
    )
    sign_in(page, platform)
    page.get_by_role("link", name="Live calls").click()
    row = page.locator(f"tr[data-session-id='{turn['id']}']")
    row.wait_for()
    row.get_by_role("button", name=re.compile("^End call")).click()
    page.locator("#announce", has_text="The call was ended.").wait_for()
    stored = _check(httpx.get(f"{platform['url']}/api/sessions/{turn['id']}", headers=headers))
    assert stored["status"] == "ended"


def test_usage_reports_and_evaluations(page: Any, platform: dict[str, Any], shots: Path) -> None:
    sign_in(page, platform)
    page.get_by_role("link", name="Usage and reports").click()
    page.locator("svg.chart rect.bar").first.wait_for()
    assert page.locator(".card", has_text="Calls").locator(".figure").first.text_content() != "0"
    page.screenshot(path=str(shots / "06-usage.png"), full_page=True)
    page.get_by_role("link", name="Evaluation runs").click()
    exists = (
        httpx.get(f"{platform['url']}/api/evaluations/runs", headers=platform["headers"]).status_code == 200
    )
    if exists:
        page.locator(".list-status", has_text=re.compile("shown|Nothing here")).wait_for()
    else:
        page.locator("#evals-unavailable").wait_for()


def test_the_german_interface(page: Any, platform: dict[str, Any], shots: Path) -> None:
    page.goto(f"{platform['url']}/console")
    page.locator("#lang-signin").select_option("de")
    page.get_by_label("Token oder API-Schlüssel").fill(platform["token"])
    page.get_by_role("button", name="Anmelden").click()
    page.get_by_label("Organisation").select_option(platform["org"])
    page.get_by_role("link", name="Anrufe", exact=True).click()
    page.get_by_role("heading", name="Anrufe", level=1).wait_for()
    page.locator("table.calls tbody tr").first.wait_for()
    assert page.locator("html").get_attribute("lang") == "de"
    assert page.get_by_role("columnheader", name="Ergebnis").count() == 1
    # Outcomes are shown in German (the newest calls of the module's earlier tests may all be abandoned).
    page.locator(
        ".badge", has_text=re.compile("abgeschlossen|abgebrochen|fehlgeschlagen|weitergeleitet")
    ).first.wait_for()
    page.screenshot(path=str(shots / "07-anrufe.png"), full_page=True)
    page.get_by_role("link", name="Signale").click()
    page.get_by_role("heading", name="Signale", level=1).wait_for()
    # switching back keeps the page
    page.locator("#lang").select_option("en")
    page.get_by_role("heading", name="Signals", level=1).wait_for()
    assert not expected_problems(page), page.problems


def test_the_keyboard_reaches_the_navigation_and_focus_moves_to_the_page(
    page: Any, platform: dict[str, Any]
) -> None:
    sign_in(page, platform)
    page.reload()  # the credential stays in the tab: the console signs in again by itself
    page.get_by_role("navigation").wait_for()
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.textContent") == "Skip to the content"
    page.get_by_role("link", name="Signals").focus()
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Signals", level=1).wait_for()
    assert page.get_by_role("link", name="Signals").get_attribute("aria-current") == "page"
    # focus moves to the new page's heading, so a screen reader starts there
    page.wait_for_function("() => document.activeElement && document.activeElement.id === 'page-title'")
