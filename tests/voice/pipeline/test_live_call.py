"""A live call is never silent, over the real WebSocket transport (uvicorn, a migrated database):
the opening, the `end` event whichever side ends, re-prompts, false interruptions, spoken failures."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from parley.kit.db import Database
from parley.voice.lines import SpokenLines
from tests.live import serve_in_thread
from tests.stubs.openai import StubState, make_openai_stub
from tests.voice.pipeline.fakes import SILENCE, SPEECH, FrameTts
from tests.voice.pipeline.livevoice import (
    call_record_when,
    close_code,
    events_until,
    flow_with,
    greeted,
    new_session,
    publish_flow,
    use_fakes,
    wait_ended,
)

EN = SpokenLines.for_language("en")


def said(events: list[dict[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "agent_text"]


async def test_the_client_ending_the_call_hears_the_end_event(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        await ws.send(json.dumps({"type": "end"}))
        events = await events_until(ws, "end")
        assert await close_code(ws) == 1000
    assert events[-1] == {"type": "end", "outcome": "abandoned", "reason": "caller_ended"}


async def test_a_silent_caller_is_prompted_again_then_told_goodbye(live: dict[str, Any]) -> None:
    use_fakes(live)
    flow = flow_with(live, "Silent", reprompt_after_ms=300, max_reprompts=1)
    session_id = new_session(live, flow=flow)
    audio: list[bytes] = []
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        events = await events_until(ws, "end", audio)
        assert await close_code(ws) == 1000
    assert said(events) == [EN.reprompt, "Say your number.", EN.goodbye_silent]
    assert len(audio) == 3 * 5  # every line was spoken
    assert events[-1] == {"type": "end", "outcome": "abandoned", "reason": "caller_silent"}
    row = wait_ended(live, session_id)
    assert (row["outcome"], row["end_reason"]) == ("abandoned", "caller_silent")
    assert call_record_when(live, session_id)["outcome"] == "abandoned"


async def test_a_cough_over_the_agent_lets_it_say_its_sentence_again(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "", "one two")  # the cough is recognised as nothing
    fakes.tts.frames = 200  # four seconds of opening
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 3)
        for frame in [SPEECH] * 20 + [SILENCE] * 40:  # 400 ms: long enough to interrupt
            await ws.send(frame)
        events = await events_until(ws, "warning")
        assert events[-1]["code"] == "false_interruption"
        assert "interruption" in [e["type"] for e in events]
        again = await events_until(ws, "agent_text")
        assert again[-1]["text"] == "Say your number."
        await ws.send(json.dumps({"type": "end"}))
        await events_until(ws, "end")
    assert wait_ended(live, session_id)["variables"]["number"] is None  # the cough answered nothing


async def test_a_broken_recognizer_is_spoken(live: dict[str, Any]) -> None:
    fakes = use_fakes(live)
    fakes.stt.fail = True
    session_id = new_session(live)
    audio: list[bytes] = []
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        events = await events_until(ws, "agent_text", audio)
        assert any(e["type"] == "error" and e["code"] == "stt_unavailable" for e in events)
        assert events[-1]["text"] == EN.not_heard
        await ws.send(json.dumps({"type": "end"}))
        await events_until(ws, "end", audio)
    assert len(audio) >= 5  # the line was heard


async def test_a_database_outage_during_a_turn_is_spoken_and_the_call_goes_on(live: dict[str, Any]) -> None:
    use_fakes(live, "one two", "one two")
    session_id = new_session(live)
    state = live["app"].state
    database = state.db
    down = Database.from_url("postgresql+asyncpg://postgres@127.0.0.1:9/none", pool_size=1, pool_timeout=2)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        state.db = down  # the database goes away
        try:
            for frame in [SPEECH] * 10 + [SILENCE] * 40:
                await ws.send(frame)
            events = await events_until(ws, "agent_text")
        finally:
            state.db = database
        assert any(e["type"] == "error" for e in events)
        assert events[-1]["text"] == EN.failure
        for frame in [SPEECH] * 10 + [SILENCE] * 40:  # the database is back: said again, it works
            await ws.send(frame)
        events = await events_until(ws, "end")
        assert await close_code(ws) == 1000
    assert said(events)[-1] == "Thanks, your number is 12."
    assert events[-1]["outcome"] == "completed"
    await down.engine.dispose()


async def test_a_failing_voice_falls_back_to_the_offline_one(live: dict[str, Any]) -> None:
    fakes = use_fakes(live)
    fakes.tts = FrameTts(fail=True)
    fakes.fallback_tts = FrameTts(frames=4)
    session_id = new_session(live)
    audio: list[bytes] = []
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        events = await greeted(ws, 4, audio)
        assert any(e["type"] == "warning" and e["code"] == "tts_fallback" for e in events)
        await ws.send(json.dumps({"type": "end"}))
        await events_until(ws, "end")
    assert fakes.fallback_tts.texts == ["Say your number."] and len(audio) == 4
    # both voices were sent the line, so both count; the caller said nothing: a measured 0 seconds
    usage = call_record_when(live, session_id, lambda c: c["usage"]["tts_characters"] is not None)["usage"]
    assert (usage["tts_characters"], usage["stt_seconds"]) == (2 * len("Say your number."), 0.0)


async def test_a_slow_turn_gets_a_filler_before_its_answer(live: dict[str, Any]) -> None:
    use_fakes(live, "one two")
    flow = flow_with(live, "Filler", filler_after_ms=1)  # every real turn is slower than 1 ms
    session_id = new_session(live, flow=flow)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        events = await events_until(ws, "end")
    lines = said(events)
    assert lines[0] == EN.filler and lines[-1] == "Thanks, your number is 12."


async def test_an_llm_answer_is_spoken_while_it_is_generated(live: dict[str, Any]) -> None:
    """The local OpenAI-compatible stub streams its answer word by word; the agent speaks each
    sentence as soon as it is whole, and says nothing twice."""
    stub = StubState(slow_seconds=1.0)  # "slow": a word every 100 ms
    with serve_in_thread(make_openai_stub(stub)) as llm_url:
        configured = httpx.put(
            f"{live['url']}/api/providers/openai/config",
            json={"api_key": stub.api_key, "base_url": f"{llm_url}/v1", "model": "slow"},
            headers=live["headers"],
        )
        assert configured.status_code == 200, configured.text
        flow = publish_flow(
            live,
            "Chat",
            {
                "language": "en",
                "start_node": "hello",
                "nodes": [
                    {"id": "hello", "type": "say", "text": "Hello, how can I help?", "next": "chat"},
                    {
                        "id": "chat",
                        "type": "llm",
                        "system_prompt": "Answer briefly.",
                        "transitions": [
                            {"name": "goodbye", "description": "The caller is done.", "next": "bye"}
                        ],
                        "max_turns": 5,
                    },
                    {"id": "bye", "type": "end", "text": "Goodbye!"},
                ],
            },
        )
        fakes = use_fakes(live, "where is my car. tell me now")
        session_id = new_session(live, flow=flow)
        async with connect(
            f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
        ) as ws:
            await greeted(ws, 5)
            for frame in [SPEECH] * 10 + [SILENCE] * 40:
                await ws.send(frame)
            events = await events_until(ws, "metrics")
            await ws.send(json.dumps({"type": "end"}))
            await events_until(ws, "end")
    assert said(events) == ["You said:", "where is my car.", "tell me now"]
    assert fakes.tts.texts == ["Hello, how can I help?", "You said:", "where is my car.", "tell me now"]
    assert stub.completed_streams >= 1
