from __future__ import annotations

import httpx

from parley.calls.contracts import UsageRecord
from parley.kit.db import Database
from tests.calls.conftest import Recorder
from tests.conftest import auth
from tests.organizations.test_router import ALICE, BOB, create_org
from tests.reporting.data import RANGE, seed


async def test_usage_per_day_and_month(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    org = str((await create_org(client))["id"])
    other = str((await create_org(client, BOB, name="Other"))["id"])
    await seed(org, record, database)
    await record(other)

    response = await client.get("/api/billing/usage", params=RANGE, headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["granularity"] == "day" and body["timezone"] == "Europe/Berlin"
    by_day = {p["period"]: p for p in body["periods"]}
    assert sorted(by_day) == ["2026-03-02", "2026-03-03", "2026-04-01"]
    assert by_day["2026-03-02"] == {
        "period": "2026-03-02",
        "calls": 2,
        "billed_seconds": 126,
        "minutes": 2.1,
        "llm_prompt_tokens": 520,
        "llm_completion_tokens": 84,
        "voice_calls": 2,
        "tts_characters": 360,
        "stt_seconds": 43.0,
    }
    assert (by_day["2026-03-03"]["calls"], by_day["2026-03-03"]["llm_prompt_tokens"]) == (1, 0)
    assert body["totals"] == {
        "calls": 4,
        "billed_seconds": 318,
        "minutes": 5.3,
        "llm_prompt_tokens": 530,
        "llm_completion_tokens": 89,
        "voice_calls": 4,
        "tts_characters": 720,
        "stt_seconds": 86.0,
    }

    monthly = await client.get(
        "/api/billing/usage", params={**RANGE, "granularity": "month"}, headers=auth(ALICE, org)
    )
    periods = {p["period"]: p for p in monthly.json()["periods"]}
    assert sorted(periods) == ["2026-03", "2026-04"]
    assert (periods["2026-03"]["calls"], periods["2026-03"]["billed_seconds"]) == (3, 222)
    assert (periods["2026-04"]["llm_prompt_tokens"], periods["2026-04"]["minutes"]) == (10, 1.6)

    theirs = await client.get("/api/billing/usage", params=RANGE, headers=auth(BOB, other))
    assert theirs.json()["totals"]["calls"] == 1


async def test_usage_ranges(client: httpx.AsyncClient) -> None:
    org = str((await create_org(client))["id"])
    empty = await client.get("/api/billing/usage", headers=auth(ALICE, org))
    assert empty.status_code == 200
    assert empty.json()["periods"] == [] and empty.json()["totals"]["calls"] == 0
    backwards = await client.get(
        "/api/billing/usage",
        params={"since": RANGE["until"], "until": RANGE["since"]},
        headers=auth(ALICE, org),
    )
    assert backwards.status_code == 400
    bad = await client.get("/api/billing/usage", params={"granularity": "week"}, headers=auth(ALICE, org))
    assert bad.status_code == 422


async def test_a_text_call_has_no_speech_usage_and_adds_none(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    """A text session's call record keeps tts_characters and stt_seconds null (not measured, not 0);
    billing counts the call but not as a voice call, and adds nothing for its speech."""
    org = str((await create_org(client))["id"])
    await record(org, channel="web", usage=UsageRecord(llm_prompt_tokens=7))
    await record(org)  # a voice call: 180 characters, 21.5 s
    call_ids = [c["id"] for c in (await client.get("/api/calls", headers=auth(ALICE, org))).json()["items"]]
    usages = [
        (await client.get(f"/api/calls/{i}", headers=auth(ALICE, org))).json()["usage"] for i in call_ids
    ]
    assert sorted((u["tts_characters"] or 0, u["stt_seconds"]) for u in usages) == [(0, None), (180, 21.5)]
    totals = (await client.get("/api/billing/usage", params=RANGE, headers=auth(ALICE, org))).json()["totals"]
    assert (totals["calls"], totals["voice_calls"], totals["tts_characters"], totals["stt_seconds"]) == (
        2,
        1,
        180,
        21.5,
    )
