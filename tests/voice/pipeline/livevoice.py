"""Live-server fixtures for the voice transports: a migrated database (SQLite and PostgreSQL), a real
uvicorn server, an organization with a published digits flow, fake engines and client helpers."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from parley.app import create_app
from parley.config import Settings
from parley.voice.transport_ws import Engines
from tests import migrated, pg
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.voice.pipeline.fakes import FrameTts, LoudnessVad, ScriptedStt

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


# A loaded machine (CI with two test workers) may be slow to answer; slowness is not what these tests
# test, so their plain HTTP calls wait longer than httpx's default 5 s.
HTTP_TIMEOUT = 60.0


def http_get(url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("timeout", HTTP_TIMEOUT)
    return httpx.get(url, **kwargs)


def http_post(url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("timeout", HTTP_TIMEOUT)
    return httpx.post(url, **kwargs)


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
        self.fallback_tts: FrameTts | None = None

    def __call__(self) -> Engines:
        return Engines(self.stt, self.tts, self.vad, fallback_tts=self.fallback_tts)


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database of the module's own: the server commits for real."""
    if request.param == "sqlite":
        yield migrated.sqlite_url(tmp_path_factory.mktemp("voice_db") / "voice.db")
        return
    name, url = migrated.postgres("parley_voice_ws")
    try:
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
        outbound_allowlist=["127.0.0.1"],  # the local LLM stub
        log_level="WARNING",
        log_json=False,
    )
    app = create_app(settings)
    with serve_in_thread(app) as base_url:
        token = make_token("caller", ttl=3600)
        headers = {"Authorization": f"Bearer {token}"}
        org = http_post(f"{base_url}/api/organizations", json={"name": "Voice"}, headers=headers).json()["id"]
        headers["X-Organization-Id"] = org
        other_token = make_token("stranger", ttl=3600)
        other = http_post(
            f"{base_url}/api/organizations",
            json={"name": "Other"},
            headers={"Authorization": f"Bearer {other_token}"},
        ).json()["id"]
        flow = http_post(
            f"{base_url}/api/flows", json={"name": "Digits", "definition": DIGITS_FLOW}, headers=headers
        ).json()
        assert http_post(f"{base_url}/api/flows/{flow['id']}/publish", headers=headers).status_code == 200
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


def publish_flow(live: dict[str, Any], name: str, definition: dict[str, Any]) -> str:
    """A published flow of the test organization (for a test's own voice settings)."""
    flow = http_post(
        f"{live['url']}/api/flows", json={"name": name, "definition": definition}, headers=live["headers"]
    )
    assert flow.status_code == 200, flow.text
    published = http_post(f"{live['url']}/api/flows/{flow.json()['id']}/publish", headers=live["headers"])
    assert published.status_code == 200, published.text
    return str(flow.json()["id"])


def flow_with(live: dict[str, Any], name: str, **turn_taking: Any) -> str:
    """A published copy of the digits flow with these ``voice.turn_taking`` settings."""
    definition = copy.deepcopy(DIGITS_FLOW)
    definition["voice"] = {"turn_taking": turn_taking}
    return publish_flow(live, name, definition)


def new_session(live: dict[str, Any], channel: str = "web", flow: str | None = None) -> str:
    created = http_post(
        f"{live['url']}/api/sessions",
        json={"flow_id": flow or live["flow"], "voiced": True, "channel": channel},
        headers=live["headers"],
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
    return dict(http_get(f"{live['url']}/api/sessions/{session_id}", headers=live["headers"]).json())


def wait_ended(live: dict[str, Any], session_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while (row := session(live, session_id))["status"] != "ended":
        assert time.monotonic() < deadline, row
        time.sleep(0.05)
    return row


def call_of(live: dict[str, Any], session_id: str) -> dict[str, Any]:
    calls = http_get(f"{live['url']}/api/calls", params={"limit": 100}, headers=live["headers"]).json()[
        "items"
    ]
    ids = [c["id"] for c in calls]
    for call_id in ids:
        full = http_get(f"{live['url']}/api/calls/{call_id}", headers=live["headers"]).json()
        if full["session_id"] == session_id:
            return dict(full)
    raise AssertionError(f"no call record for {session_id}")


def call_record_when(live: dict[str, Any], session_id: str, ready: Any = lambda call: True) -> dict[str, Any]:
    """The session's call record once ``ready(call)`` holds (the transport completes it after the end)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            call = call_of(live, session_id)
        except AssertionError:
            call = None
        if call is not None and ready(call):
            return call
        assert time.monotonic() < deadline, call
        time.sleep(0.05)


def recording_of(live: dict[str, Any], call: dict[str, Any]) -> tuple[wave._wave_params, np.ndarray]:
    """Download the call's recording; its parameters and samples as an (n, channels) array."""
    assert call["recording_url"], call
    response = http_get(f"{live['url']}{call['recording_url']}", headers=live["headers"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(response.content), "rb") as reader:
        params = reader.getparams()
        frames = reader.readframes(reader.getnframes())
    samples = np.frombuffer(frames, dtype="<i2").astype(np.int64).reshape(-1, params.nchannels)
    return params, samples


def rms(samples: np.ndarray) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if samples.size else 0.0


async def greeted(
    ws: ClientConnection, frames: int, audio: list[bytes] | None = None
) -> list[dict[str, Any]]:
    """``ready``, then the flow's opening: its ``agent_text`` and ``frames`` frames of its audio."""
    events = [json.loads(await asyncio.wait_for(ws.recv(), 10))]
    assert events[0]["type"] == "ready", events
    heard = audio if audio is not None else []
    start = len(heard)
    while not any(e["type"] == "agent_text" for e in events) or len(heard) - start < frames:
        message = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(message, bytes):
            heard.append(message)
        else:
            events.append(json.loads(message))
    return events
