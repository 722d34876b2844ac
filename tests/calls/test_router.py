from __future__ import annotations

from typing import Any

import httpx

from tests.calls.conftest import Recorder
from tests.calls.helpers import order_lookup, wav_bytes
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, create_org

BOB = make_token("bob", name="Bob")
VIEWER = make_token("victor", name="Victor")


async def test_a_recorded_call_reads_back_in_full(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    call = await record(
        org,
        tool_calls=[order_lookup(status="error", http_status=404, result={"success": False})],
        recording_filename="full-1.wav",
    )
    response = await client.get(f"/api/calls/{call.id}", headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == call.id and body["session_id"] == "ses_01TEST"
    assert body["channel"] == "phone" and body["caller"] == "+4930123456"
    assert body["duration_seconds"] == 95.2 and body["turn_count"] == 5
    assert body["transcript"][0]["speaker"] == "agent"
    assert body["tool_calls"][0]["arguments"] == {"order_number": "A-1001"}
    assert body["turn_metrics"][0]["voice_to_voice_ms"] == 700.0
    assert body["usage"] == {
        "llm_prompt_tokens": 420,
        "llm_completion_tokens": 64,
        "tts_characters": 180,
        "stt_seconds": 21.5,
    }
    assert body["signal_types"] == ["order_not_found", "tool_failure"]
    assert sorted(s["type"] for s in body["signals"]) == ["order_not_found", "tool_failure"]
    assert body["recording_url"] == "/api/calls/recording-file/full-1.wav"


async def test_bad_filters_are_refused(client: httpx.AsyncClient) -> None:
    org = str((await create_org(client))["id"])
    for params in ({"channel": "fax"}, {"outcome": "great"}, {"since": "yesterday"}, {"has_signal": "maybe"}):
        response = await client.get("/api/monitoring/calls/history", params=params, headers=auth(ALICE, org))
        assert response.status_code == 422, params
    response = await client.get("/api/calls", params={"caller": "a\x00b"}, headers=auth(ALICE, org))
    assert response.status_code == 400
    for since in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        response = await client.get("/api/calls", params={"since": since}, headers=auth(ALICE, org))
        assert response.status_code == 400, since
        assert "out of range" in response.json()["detail"]


async def test_another_organizations_calls_are_404(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    theirs = str((await create_org(client, BOB, name="Bob's Garage"))["id"])
    call = await record(theirs, recording_filename="bobs-call.wav")
    assert (await client.get(f"/api/calls/{call.id}", headers=auth(ALICE, org))).status_code == 404
    assert (await client.get(f"/api/calls/{call.id}", headers=auth(BOB, theirs))).status_code == 200
    history = await client.get("/api/monitoring/calls/history", headers=auth(ALICE, org))
    assert history.json()["items"] == []
    recording = await client.get("/api/calls/recording-file/bobs-call.wav", headers=auth(ALICE, org))
    assert recording.status_code == 404


async def test_viewers_read_calls(client: httpx.AsyncClient, record: Recorder) -> None:
    org = str((await create_org(client))["id"])
    added = await client.post(
        f"/api/organizations/{org}/members", json={"subject": "victor", "role": "viewer"}, headers=auth(ALICE)
    )
    assert added.status_code == 200
    call = await record(org)
    assert (await client.get(f"/api/calls/{call.id}", headers=auth(VIEWER, org))).status_code == 200
    assert (await client.get("/api/monitoring/calls/history", headers=auth(VIEWER, org))).status_code == 200


async def test_recording_download_with_ranges(client: httpx.AsyncClient, record: Recorder, app: Any) -> None:
    org = str((await create_org(client))["id"])
    call = await record(org, recording_filename="rec_2026-03-02.wav")
    data = wav_bytes()
    await app.state.blobs.put(call.blob_key, data, "audio/wav")
    path = "/api/calls/recording-file/rec_2026-03-02.wav"
    headers = auth(ALICE, org)

    whole = await client.get(path, headers=headers)
    assert whole.status_code == 200
    assert whole.content == data
    assert whole.headers["content-type"] == "audio/wav"
    assert whole.headers["content-disposition"] == 'attachment; filename="rec_2026-03-02.wav"'
    assert whole.headers["x-content-type-options"] == "nosniff"
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.content[:4] == b"RIFF" and whole.content[8:12] == b"WAVE"

    part = await client.get(path, headers={**headers, "Range": "bytes=0-11"})
    assert part.status_code == 206
    assert part.content == data[:12]
    assert part.headers["content-range"] == f"bytes 0-11/{len(data)}"

    tail = await client.get(path, headers={**headers, "Range": "bytes=-4"})
    assert tail.status_code == 206 and tail.content == data[-4:]

    past = await client.get(path, headers={**headers, "Range": f"bytes={len(data)}-"})
    assert past.status_code == 416
    assert past.headers["content-range"] == f"bytes */{len(data)}"


async def test_recording_names_are_never_paths(client: httpx.AsyncClient, record: Recorder, app: Any) -> None:
    org = str((await create_org(client))["id"])
    call = await record(org, recording_filename="safe.wav")
    await app.state.blobs.put(call.blob_key, wav_bytes(), "audio/wav")
    headers = auth(ALICE, org)
    for name in [
        "..%2Fsafe.wav",
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        f"..%2F{org}%2Frecordings%2Fsafe.wav",
        "safe.WAV",
        "safe.wav%00",
        "unknown.wav",
        "....wav",
        "safe.mp3",
    ]:
        response = await client.get(f"/api/calls/recording-file/{name}", headers=headers)
        assert response.status_code == 404, (name, response.status_code)
    assert (await client.get("/api/calls/recording-file/safe.wav", headers=headers)).status_code == 200


async def test_a_call_whose_recording_is_not_stored_yet_is_404(
    client: httpx.AsyncClient, record: Recorder
) -> None:
    org = str((await create_org(client))["id"])
    await record(org, recording_filename="later.wav")
    response = await client.get("/api/calls/recording-file/later.wav", headers=auth(ALICE, org))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


async def test_deleting_the_organization_removes_calls_signals_and_recordings(
    client: httpx.AsyncClient, record: Recorder, app: Any
) -> None:
    org = str((await create_org(client))["id"])
    call = await record(
        org, recording_filename="gone.wav", tool_calls=[order_lookup(status="timeout", http_status=None)]
    )
    await app.state.blobs.put(call.blob_key, wav_bytes(), "audio/wav")
    assert (await client.delete(f"/api/organizations/{org}", headers=auth(ALICE))).status_code == 200
    assert not await app.state.blobs.exists(call.blob_key)
    again = str((await create_org(client, name="Again"))["id"])
    assert (await client.get("/api/brain/signals", headers=auth(ALICE, again))).json()["items"] == []
    # The name is free again once its call is gone.
    reused = await record(again, recording_filename="gone.wav")
    assert reused.recording_filename == "gone.wav"
