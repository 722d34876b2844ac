from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from tests.calls.conftest import Recorder
from tests.calls.helpers import START
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org


async def _seed(org: str, record: Recorder) -> dict[str, Any]:
    calls = {
        "old_web": await record(org, channel="web", caller=None, started_at=START - timedelta(days=3)),
        "phone_ok": await record(org, started_at=START),
        "angry": await record(
            org,
            started_at=START + timedelta(hours=1),
            caller="+4917000000",
            lines=(("agent", "Hallo"), ("caller", "Das ist eine Frechheit!")),
            outcome="abandoned",
        ),
        "other_flow": await record(org, started_at=START + timedelta(hours=2), flow_id="flow_01OTHER"),
    }
    return calls


async def test_history_filters_and_pages_newest_first(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    calls = await _seed(org, record)
    headers = auth(ALICE, org)

    async def ids(**params: Any) -> list[str]:
        response = await client.get("/api/monitoring/calls/history", params=params, headers=headers)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    everything = await ids()
    assert everything == [calls[k].id for k in ("other_flow", "angry", "phone_ok", "old_web")]
    assert await ids(channel="web") == [calls["old_web"].id]
    assert await ids(outcome="abandoned") == [calls["angry"].id]
    assert await ids(caller="+4917000000") == [calls["angry"].id]
    assert await ids(flow_id="flow_01OTHER") == [calls["other_flow"].id]
    assert await ids(has_signal="true") == [calls["angry"].id]
    assert len(await ids(has_signal="false")) == 3
    assert await ids(signal_type="negative_sentiment") == [calls["angry"].id]
    assert await ids(signal_type="tool_failure") == []
    assert await ids(since=START.isoformat(), until=(START + timedelta(hours=2)).isoformat()) == [
        calls["angry"].id,
        calls["phone_ok"].id,
    ]
    # Without an offset, times are UTC.
    assert await ids(since="2026-03-02T10:30:00") == [calls["other_flow"].id]

    first = await client.get("/api/monitoring/calls/history", params={"limit": 3}, headers=headers)
    page = first.json()
    assert len(page["items"]) == 3 and page["next_cursor"]
    rest = await client.get(
        "/api/monitoring/calls/history", params={"limit": 3, "cursor": page["next_cursor"]}, headers=headers
    )
    assert [i["id"] for i in rest.json()["items"]] == [calls["old_web"].id]
    assert rest.json()["next_cursor"] is None

    entry = next(i for i in page["items"] if i["id"] == calls["angry"].id)
    assert entry["signal_types"] == ["negative_sentiment"]
    assert entry["turn_count"] == 2 and entry["duration_seconds"] == 95.2
    assert entry["mean_voice_latency_ms"] == 700.0

    listed = await client.get("/api/calls", params={"channel": "phone", "limit": 2}, headers=headers)
    assert [i["id"] for i in listed.json()["items"]] == [calls["other_flow"].id, calls["angry"].id]
