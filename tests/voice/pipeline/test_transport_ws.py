"""``GET /api/sessions/{sessionId}/audio`` over a real server (uvicorn) with the websockets client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from parley.app import create_app
from parley.config import Settings
from parley.kit.migrate import upgrade
from parley.voice.transport_ws import Engines
from tests import pg
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.voice.pipeline.fakes import SILENCE, SPEECH, FrameTts, LoudnessVad, ScriptedStt

DIGITS_FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "number",
            "kind": "digits",
            "prompt": "Say your number.",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Thanks, your number is {{ number }}."},
    ],
}


class RecordingVad(LoudnessVad):
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def is_speech(self, frame: bytes) -> bool:
        self.frames.append(frame)
        return super().is_speech(frame)


class Fakes:
    def __init__(self) -> None:
        self.stt = ScriptedStt()
        self.tts = FrameTts(frames=5)
        self.vad = RecordingVad()

    def __call__(self) -> Engines:
        return Engines(self.stt, self.tts, self.vad)


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database of the module's own: the server commits for real."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('voice_db') / 'voice.db'}"
        upgrade(url)
        yield url
        return
    name, url = pg.create_database("parley_voice_ws")
    try:
        upgrade(url)
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("voice_ws")
    url = database_url
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        rate_limit_per_minute=0,
        log_level="WARNING",
        log_json=False,
    )
    app = create_app(settings)
    with serve_in_thread(app) as base_url:
        token = make_token("caller", ttl=3600)
        headers = {"Authorization": f"Bearer {token}"}
        org = httpx.post(f"{base_url}/api/organizations", json={"name": "Voice"}, headers=headers).json()[
            "id"
        ]
        headers["X-Organization-Id"] = org
        other_token = make_token("stranger", ttl=3600)
        other = httpx.post(
            f"{base_url}/api/organizations",
            json={"name": "Other"},
            headers={"Authorization": f"Bearer {other_token}"},
        ).json()["id"]
        flow = httpx.post(
            f"{base_url}/api/flows", json={"name": "Digits", "definition": DIGITS_FLOW}, headers=headers
        ).json()
        assert httpx.post(f"{base_url}/api/flows/{flow['id']}/publish", headers=headers).status_code == 200
        yield {
            "app": app,
            "url": base_url,
            "ws": base_url.replace("http://", "ws://"),
            "token": token,
            "org": org,
            "headers": headers,
            "flow": flow["id"],
            "other": {"Authorization": f"Bearer {other_token}", "X-Organization-Id": other},
        }


def new_session(live: dict[str, Any]) -> str:
    created = httpx.post(
        f"{live['url']}/api/sessions", json={"flow_id": live["flow"], "voiced": True}, headers=live["headers"]
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def use_fakes(live: dict[str, Any], *script: str) -> Fakes:
    fakes = Fakes()
    fakes.stt.script = list(script)
    live["app"].state.voice_engines = fakes
    return fakes


async def events_until(
    ws: ClientConnection, kind: str, audio: list[bytes] | None = None
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        message = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(message, bytes):
            if audio is not None:
                audio.append(message)
            continue
        event = json.loads(message)
        events.append(event)
        if event["type"] == kind:
            return events


async def close_code(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code is not None
    return ws.close_code


def session(live: dict[str, Any], session_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{live['url']}/api/sessions/{session_id}", headers=live["headers"]).json())


def wait_ended(live: dict[str, Any], session_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while (row := session(live, session_id))["status"] != "ended":
        assert time.monotonic() < deadline, row
        time.sleep(0.05)
    return row


def call_of(live: dict[str, Any], session_id: str) -> dict[str, Any]:
    calls = httpx.get(f"{live['url']}/api/calls", params={"limit": 100}, headers=live["headers"]).json()[
        "items"
    ]
    ids = [c["id"] for c in calls]
    for call_id in ids:
        full = httpx.get(f"{live['url']}/api/calls/{call_id}", headers=live["headers"]).json()
        if full["session_id"] == session_id:
            return dict(full)
    raise AssertionError(f"no call record for {session_id}")


async def test_a_spoken_answer_gets_a_spoken_reply_and_the_call_is_recorded(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one two")
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    async with connect(url, additional_headers=live["headers"]) as ws:
        ready = json.loads(await ws.recv())
        assert ready == {"type": "ready", "session_id": session_id, "sample_rate": 16000, "frame_ms": 20}
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        audio: list[bytes] = []
        events = await events_until(ws, "end", audio)
        assert await close_code(ws) == 1000
    kinds = [e["type"] for e in events]
    assert kinds[0] == "speech" and events[0]["speaking"] is True
    assert {"type": "transcript", "final": True, "text": "one two"} in events
    agent = next(e for e in events if e["type"] == "agent_text")
    assert agent["text"] == "Thanks, your number is 12." and agent["turn"] == 1
    assert len(audio) == 5 and all(len(a) == 640 for a in audio)
    metrics = next(e for e in events if e["type"] == "metrics")
    assert metrics["turn"] == 1 and metrics["voice_to_voice_ms"] is not None
    assert events[-1] == {"type": "end", "outcome": "completed", "reason": events[-1]["reason"]}
    # the flow's collect node expects digits: the recognizer was given them as phrases
    assert fakes.stt.phrases[0] is not None and "two" in fakes.stt.phrases[0]
    row = wait_ended(live, session_id)
    assert row["variables"]["number"] == "12"
    assert call_of(live, session_id)["outcome"] == "completed"


async def test_the_token_and_organization_may_come_in_the_query_string(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio?token={live['token']}&org={live['org']}"
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000
    row = wait_ended(live, session_id)
    assert row["outcome"] == "completed" and row["end_reason"] == "caller_ended"


async def test_a_short_lived_stream_token_opens_only_its_own_session(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id, other_session = new_session(live), new_session(live)
    issued = httpx.post(f"{live['url']}/api/sessions/{session_id}/audio-token", headers=live["headers"])
    assert issued.status_code == 200, issued.text
    grant = issued.json()
    assert grant["token"].startswith("pst_") and grant["audio_path"] == f"/api/sessions/{session_id}/audio"
    async with connect(f"{live['ws']}/api/sessions/{other_session}/audio?token={grant['token']}") as ws:
        assert await close_code(ws) == 4401  # bound to the session it was issued for
    tampered = grant["token"][:-2] + ("AA" if not grant["token"].endswith("AA") else "BB")
    async with connect(f"{live['ws']}{grant['audio_path']}?token={tampered}") as ws:
        assert await close_code(ws) == 4401
    async with connect(f"{live['ws']}{grant['audio_path']}?token={grant['token']}") as ws:  # no org needed
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000
    foreign = httpx.post(f"{live['url']}/api/sessions/{session_id}/audio-token", headers=live["other"])
    assert foreign.status_code == 404
    ended = httpx.post(f"{live['url']}/api/sessions/{session_id}/audio-token", headers=live["headers"])
    assert ended.status_code == 409


async def test_refusals_close_with_their_codes(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    async with connect(url) as ws:
        assert await close_code(ws) == 4401
    async with connect(url + "?token=not-a-token") as ws:
        assert await close_code(ws) == 4401
    async with connect(url, additional_headers=live["other"]) as ws:  # another organization's session
        assert await close_code(ws) == 4404
    missing = f"{live['ws']}/api/sessions/ses_missing/audio"
    async with connect(missing, additional_headers=live["headers"]) as ws:
        assert await close_code(ws) == 4404
    keys = f"{live['url']}/api/api-keys"
    reader = httpx.post(keys, json={"name": "reader", "scopes": ["read"]}, headers=live["headers"])
    assert reader.status_code == 200, reader.text
    async with connect(f"{url}?token={reader.json()['secret']}") as ws:  # a viewer's key may not talk
        assert await close_code(ws) == 4403
    writer = httpx.post(keys, json={"name": "writer", "scopes": ["write"]}, headers=live["headers"])
    async with connect(f"{url}?token={writer.json()['secret']}") as ws:  # an API key: its organization
        assert json.loads(await ws.recv())["type"] == "ready"
    gone = wait_ended(live, session_id)  # the client went away: the session ended with it
    assert (gone["outcome"], gone["end_reason"]) == ("abandoned", "caller_hung_up")
    assert call_of(live, session_id)["outcome"] == "abandoned"
    async with connect(url, additional_headers=live["headers"]) as ws:
        assert await close_code(ws) == 4409
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    ended = httpx.post(f"{live['url']}/api/sessions/{session_id}/end", headers=live["headers"])
    assert ended.status_code == 200, ended.text
    async with connect(url, additional_headers=live["headers"]) as ws:
        assert await close_code(ws) == 4409


async def test_bad_input_gets_error_events_and_the_audio_stays_aligned(live: dict[str, Any]) -> None:
    fakes = use_fakes(live)
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    first, second = bytes(range(256)) * 2 + bytes(128), bytes(reversed(range(256))) * 2 + bytes(128)
    audio = first + second  # two 20 ms frames
    async with connect(url, additional_headers=live["headers"]) as ws:
        await ws.recv()
        await ws.send(audio[:641])  # an odd byte count: the half sample waits for the next frame
        odd = await events_until(ws, "error")
        assert odd[-1]["code"] == "odd_frame" and "641 bytes" in odd[-1]["detail"]
        await ws.send(audio[641:])  # odd as well: the carried byte completes its sample
        assert "639 bytes" in (await events_until(ws, "error"))[-1]["detail"]
        await ws.send("this is not JSON")
        bad = await events_until(ws, "error")
        assert bad[-1]["code"] == "invalid_json"
        await ws.send(json.dumps({"type": "dance"}))
        assert (await events_until(ws, "error"))[-1]["code"] == "unknown_message"
        # a flood: ten seconds of audio at once; the oldest is dropped with a warning, memory stays bounded
        await ws.send(SILENCE * 500)
        warning = await events_until(ws, "warning")
        assert warning[-1]["code"] == "audio_dropped" and "5000 ms" in warning[-1]["detail"]
        await ws.send(json.dumps({"type": "end"}))
        await close_code(ws)
    assert fakes.vad.frames[:2] == [first, second]
    assert len(fakes.vad.frames) == 2 + 250


async def test_a_caller_who_disappears_mid_utterance_still_gets_the_turn_and_a_call_record(
    live: dict[str, Any],
) -> None:
    fakes = use_fakes(live, "seven")
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    async with connect(url, additional_headers=live["headers"]) as ws:
        await ws.recv()
        for frame in [SPEECH] * 10:
            await ws.send(frame)
        await events_until(ws, "speech")
    row = wait_ended(live, session_id)
    assert fakes.stt.script == []  # the utterance was recognised after the hang-up
    assert row["variables"]["number"] == "7" and row["outcome"] == "completed"
    assert call_of(live, session_id)["session_id"] == session_id


async def test_barge_in_over_the_socket_sends_an_interruption(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one", "two")
    fakes.tts.frames = 200  # four seconds of agent audio, paced in real time
    live["app"].state.voice_engines = fakes
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    async with connect(url, additional_headers=live["headers"]) as ws:
        await ws.recv()
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        audio: list[bytes] = []
        while len(audio) < 3:
            message = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(message, bytes):
                audio.append(message)
        for frame in [SPEECH] * 5:
            await ws.send(frame)
        events = await events_until(ws, "interruption", audio)
        assert events[-1]["turn"] == 1
        received = len(audio)
        # the answer ended the flow: the interrupted turn still ends the conversation
        after = await events_until(ws, "end", audio)
        assert await close_code(ws) == 1000
    assert received < 200 and len(audio) == received  # no agent audio after the interruption
    assert [e["type"] for e in after][-2:] == ["metrics", "end"]
    assert fakes.tts.closed >= 1


async def test_real_offline_engines_end_to_end(live: dict[str, Any]) -> None:
    """eSpeak says "one two"; the socket carries it in 20 ms frames to PocketSphinx (with the collect
    node's digits as phrases), the flow answers, and eSpeak's reply comes back as audio."""
    from parley.voice.engines.espeak import EspeakTts

    caller = b"".join([c async for c in EspeakTts("en-us").synthesize("one two", sample_rate=16000)])
    live["app"].state.voice_engines = None  # the flow's engines: eSpeak NG, PocketSphinx, WebRTC VAD
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    audio: list[bytes] = []
    async with connect(url, additional_headers=live["headers"]) as ws:
        await ws.recv()
        pcm = SILENCE * 15 + caller + SILENCE * 60
        for start in range(0, len(pcm), 640):
            await ws.send(pcm[start : start + 640])
        events = await events_until(ws, "end", audio)
        assert await close_code(ws) == 1000
    finals = [e["text"] for e in events if e["type"] == "transcript" and e["final"]]
    assert finals == ["one two"]
    replies = [e["text"] for e in events if e["type"] == "agent_text"]
    assert replies == ["Thanks, your number is 12."]
    assert len(audio) > 25 and all(len(a) == 640 for a in audio)  # at least half a second of voice
    assert any(a != bytes(640) for a in audio)
    metrics = next(e for e in events if e["type"] == "metrics")
    assert metrics["stt_final_ms"] is not None and metrics["tts_first_byte_ms"] is not None
    assert call_of(live, session_id)["outcome"] == "completed"
