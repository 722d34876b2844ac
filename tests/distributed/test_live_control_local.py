"""Without Redis: /voice and /end reach the live audio stream held by the same process.

The in-process registry delivers the control message once the request has committed: switching voice
off mutes the agent's audio (its text still arrives), and ending the session closes the stream with
an ``end`` event, the session keeping the reason it was ended with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from parley.app import create_app
from parley.config import Settings
from parley.sessions.registry import LocalRegistry
from parley.voice.transport_ws import Engines
from tests import migrated
from tests.conftest import JWT_SECRET, auth, make_token
from tests.live import serve_in_thread
from tests.voice.pipeline.fakes import SILENCE, SPEECH, FrameTts, LoudnessVad, ScriptedStt

# Real-time audio: run in a process of its own (make test), where no earlier test's threads compete.
pytestmark = pytest.mark.realtime

# FrameTts speaks every utterance as this many 20 ms frames
GREETING_FRAMES = 5

TWICE_FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "a",
            "kind": "digits",
            "prompt": "First?",
            "next": "again",
        },
        {
            "id": "again",
            "type": "collect",
            "variable": "b",
            "kind": "digits",
            "prompt": "Again?",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Thanks."},
    ],
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir: Path = tmp_path_factory.mktemp("live_control")
    url = migrated.sqlite_url(data_dir / "parley.db")
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        rate_limit_per_minute=0,
        log_level="WARNING",
        log_json=False,
    )
    app = create_app(settings)
    stt = ScriptedStt()
    app.state.voice_engines = lambda: Engines(stt, FrameTts(frames=GREETING_FRAMES), LoudnessVad())
    with serve_in_thread(app) as base_url:
        token = make_token("control-user")
        org = httpx.post(
            f"{base_url}/api/organizations", json={"name": "Control"}, headers=auth(token)
        ).json()
        headers = auth(token, org["id"])
        flow = httpx.post(
            f"{base_url}/api/flows", json={"name": "Twice", "definition": TWICE_FLOW}, headers=headers
        ).json()
        assert httpx.post(f"{base_url}/api/flows/{flow['id']}/publish", headers=headers).status_code == 200
        yield {"app": app, "url": base_url, "headers": headers, "flow": flow["id"], "stt": stt}


async def _events_until(ws: ClientConnection, kind: str, audio: list[bytes]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        message = await asyncio.wait_for(ws.recv(), 20)
        if isinstance(message, bytes):
            audio.append(message)
            continue
        events.append(json.loads(message))
        if events[-1]["type"] == kind:
            return events


async def _greeting(ws: ClientConnection) -> list[bytes]:
    """The flow's opening, spoken as soon as the line opens (before any control message can arrive):
    read its audio (FrameTts: 5 frames) so what follows counts only the answer's audio."""
    audio: list[bytes] = []
    while len(audio) < GREETING_FRAMES:
        message = await asyncio.wait_for(ws.recv(), 20)
        if isinstance(message, bytes):
            audio.append(message)
    return audio


async def test_voice_off_mutes_and_end_closes_the_live_stream(live: dict[str, Any]) -> None:
    assert isinstance(live["app"].state.live_sessions, LocalRegistry)
    live["stt"].script = ["one two"]
    async with httpx.AsyncClient(base_url=live["url"], headers=live["headers"]) as client:
        created = await client.post("/api/sessions", json={"flow_id": live["flow"], "voiced": True})
        session_id = created.json()["id"]
        ws_url = live["url"].replace("http://", "ws://") + f"/api/sessions/{session_id}/audio"
        async with connect(ws_url, additional_headers=live["headers"]) as ws:
            assert json.loads(await ws.recv())["type"] == "ready"
            assert len(await _greeting(ws)) == GREETING_FRAMES
            muted = await client.post(f"/api/sessions/{session_id}/voice", json={"voiced": False})
            assert muted.status_code == 200
            for frame in [SPEECH] * 10 + [SILENCE] * 40:
                await ws.send(frame)
            audio: list[bytes] = []
            events = await _events_until(ws, "metrics", audio)
            assert any(e["type"] == "agent_text" and e["text"] == "Again?" for e in events), events
            assert audio == []  # spoken output is off: the text came, the audio did not

            ended = await client.post(f"/api/sessions/{session_id}/end")
            assert ended.status_code == 200
            events = await _events_until(ws, "end", audio)
            assert events[-1] == {"type": "end", "outcome": "abandoned", "reason": "ended_by_client"}
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 20)
            assert ws.close_code == 1000
        for _ in range(100):  # the stream released its registration when it closed
            if not live["app"].state.live_sessions.handlers:
                break
            await asyncio.sleep(0.05)
        assert session_id not in live["app"].state.live_sessions.handlers
        row = (await client.get(f"/api/sessions/{session_id}")).json()
        assert row["status"] == "ended" and row["end_reason"] == "ended_by_client"


async def test_voice_on_again_unmutes(live: dict[str, Any]) -> None:
    live["stt"].script = ["three"]
    async with httpx.AsyncClient(base_url=live["url"], headers=live["headers"]) as client:
        created = await client.post("/api/sessions", json={"flow_id": live["flow"], "voiced": True})
        session_id = created.json()["id"]
        ws_url = live["url"].replace("http://", "ws://") + f"/api/sessions/{session_id}/audio"
        async with connect(ws_url, additional_headers=live["headers"]) as ws:
            assert json.loads(await ws.recv())["type"] == "ready"
            assert len(await _greeting(ws)) == GREETING_FRAMES
            assert (
                await client.post(f"/api/sessions/{session_id}/voice", json={"voiced": False})
            ).status_code == 200
            assert (
                await client.post(f"/api/sessions/{session_id}/voice", json={"voiced": True})
            ).status_code == 200
            for frame in [SPEECH] * 10 + [SILENCE] * 40:
                await ws.send(frame)
            audio: list[bytes] = []
            await _events_until(ws, "metrics", audio)
            assert len(audio) == GREETING_FRAMES  # the answer is spoken again (FrameTts: 5 frames)
            await ws.send(json.dumps({"type": "end"}))


async def test_the_idle_sweeper_ends_a_silent_live_stream(tmp_path: Path) -> None:
    url = await asyncio.to_thread(migrated.sqlite_url, tmp_path / "parley.db")
    settings = Settings(
        data_dir=tmp_path,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        session_idle_seconds=1.0,
        log_level="WARNING",
        log_json=False,
    )
    app = create_app(settings)
    app.state.voice_engines = lambda: Engines(ScriptedStt(), FrameTts(frames=5), LoudnessVad())
    with serve_in_thread(app) as base_url:
        token = make_token("idle-user")
        async with httpx.AsyncClient(base_url=base_url, headers=auth(token)) as client:
            org = (await client.post("/api/organizations", json={"name": "Idle"})).json()["id"]
            client.headers["X-Organization-Id"] = org
            flow = (await client.post("/api/flows", json={"name": "Twice", "definition": TWICE_FLOW})).json()
            assert (await client.post(f"/api/flows/{flow['id']}/publish")).status_code == 200
            session_id = (await client.post("/api/sessions", json={"flow_id": flow["id"]})).json()["id"]
            ws_url = base_url.replace("http://", "ws://") + f"/api/sessions/{session_id}/audio"
            async with connect(ws_url, additional_headers=auth(token, org)) as ws:
                assert json.loads(await ws.recv())["type"] == "ready"
                events = await _events_until(ws, "end", [])  # the caller says nothing
            assert events[-1] == {"type": "end", "outcome": "abandoned", "reason": "idle_timeout"}
            row = (await client.get(f"/api/sessions/{session_id}")).json()
            assert row["end_reason"] == "idle_timeout"
