from __future__ import annotations

import csv
import io

import httpx

from parley.kit.db import Database
from parley.reporting.service import p95
from tests.calls.conftest import Recorder
from tests.conftest import auth
from tests.organizations.test_router import ALICE, BOB, create_org
from tests.reporting.data import RANGE, seed


async def test_calls_summary_per_day(client: httpx.AsyncClient, record: Recorder, database: Database) -> None:
    org = str((await create_org(client))["id"])
    await seed(org, record, database)
    response = await client.get("/api/reporting/calls/summary", params=RANGE, headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    days = {d["day"]: d for d in response.json()["days"]}
    assert sorted(days) == ["2026-03-02", "2026-03-03", "2026-04-01"]
    assert days["2026-03-02"] == {
        "day": "2026-03-02",
        "calls": 2,
        "minutes": 2.1,
        "outcomes": {"completed": 1, "transferred": 0, "abandoned": 1, "failed": 0},
        "mean_voice_latency_ms": 850.0,
        "p95_voice_latency_ms": 1100.0,
        "voice_calls": 2,
        "tts_characters": 360,
        "stt_seconds": 43.0,
        "top_signals": [
            {"type": "callback_requested", "count": 1},
            {"type": "negative_sentiment", "count": 1},
        ],
    }
    text_day = days["2026-03-03"]
    assert text_day["outcomes"]["failed"] == 1
    assert text_day["mean_voice_latency_ms"] is None and text_day["p95_voice_latency_ms"] is None
    assert text_day["top_signals"] == []

    one_flow = await client.get(
        "/api/reporting/calls/summary", params={**RANGE, "flow_id": "flow_01OTHER"}, headers=auth(ALICE, org)
    )
    assert [d["day"] for d in one_flow.json()["days"]] == ["2026-04-01"]


async def test_calls_summary_as_csv(client: httpx.AsyncClient, record: Recorder, database: Database) -> None:
    org = str((await create_org(client))["id"])
    await seed(org, record, database)
    by_param = await client.get(
        "/api/reporting/calls/summary", params={**RANGE, "format": "csv"}, headers=auth(ALICE, org)
    )
    by_accept = await client.get(
        "/api/reporting/calls/summary", params=RANGE, headers={**auth(ALICE, org), "Accept": "text/csv"}
    )
    for response in (by_param, by_accept):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/csv")
    assert by_param.text == by_accept.text
    rows = list(csv.DictReader(io.StringIO(by_param.text)))
    assert [r["day"] for r in rows] == ["2026-03-02", "2026-03-03", "2026-04-01"]
    first = rows[0]
    assert (first["calls"], first["minutes"], first["completed"], first["abandoned"]) == (
        "2",
        "2.1",
        "1",
        "1",
    )
    assert (first["mean_voice_latency_ms"], first["p95_voice_latency_ms"]) == ("850.0", "1100.0")
    assert first["top_signals"] == "callback_requested:1;negative_sentiment:1"
    assert rows[1]["mean_voice_latency_ms"] == ""
    assert (first["voice_calls"], first["tts_characters"], first["stt_seconds"]) == ("2", "360", "43.0")


async def test_calls_summary_is_per_organization(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    org = str((await create_org(client))["id"])
    other = str((await create_org(client, BOB, name="Other"))["id"])
    await seed(org, record, database)
    response = await client.get("/api/reporting/calls/summary", params=RANGE, headers=auth(BOB, other))
    assert response.json()["days"] == []
    assert (
        await client.get("/api/reporting/calls/summary", params={"format": "xml"}, headers=auth(BOB, other))
    ).status_code == 422


def test_p95_is_nearest_rank() -> None:
    assert p95([]) is None
    assert p95([5.0]) == 5.0
    assert p95([float(v) for v in range(1, 101)]) == 95.0
    assert p95([float(v) for v in range(1, 21)]) == 19.0
