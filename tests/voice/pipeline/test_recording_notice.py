"""The organization's recording notice is the first thing a voice caller hears, before the flow's
greeting, over the audio WebSocket (a real server, the fake engines)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.voice.pipeline.livevoice import close_code, greeted, new_session, use_fakes, wait_ended

NOTICE = "This call is recorded for quality purposes."


async def test_the_recording_notice_is_spoken_before_the_greeting(live: dict[str, Any]) -> None:
    settings = httpx.patch(
        f"{live['url']}/api/privacy/settings",
        json={"recording_notice": {"de": "Dieses Gespräch wird aufgezeichnet.", "en": NOTICE}},
        headers=live["headers"],
    )
    assert settings.status_code == 200, settings.text
    fakes = use_fakes(live)
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        events = await greeted(ws, 5)
        texts = [e["text"] for e in events if e["type"] == "agent_text"]
        while not any("Say your number." in t for t in texts):
            message = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(message, str) and json.loads(message)["type"] == "agent_text":
                texts.append(json.loads(message)["text"])
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000
    # the first text spoken is the notice (in the flow's language), then the flow's opening
    assert texts[0].startswith(NOTICE), texts
    assert fakes.tts.texts[0].startswith(NOTICE) and "Say your number." in " ".join(fakes.tts.texts)
    wait_ended(live, session_id)
    # the notice is not part of the conversation's transcript
    call = httpx.get(f"{live['url']}/api/sessions/{session_id}", headers=live["headers"]).json()
    assert all(NOTICE not in t["text"] for t in call["transcript"])

    # without a notice the greeting comes first again
    cleared = httpx.patch(
        f"{live['url']}/api/privacy/settings", json={"recording_notice": {}}, headers=live["headers"]
    )
    assert cleared.status_code == 200
    fakes = use_fakes(live)
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        events = await greeted(ws, 5)
        first = next(e for e in events if e["type"] == "agent_text")
        assert first["text"] == "Say your number."
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000
    wait_ended(live, session_id)


# Real-time audio: run in a process of its own (make test), where no earlier test's threads compete.
pytestmark = pytest.mark.realtime
