"""Call events tell what happened: console tests send none; a voice call's ``call.ended`` waits for the
transport's recording, voice figures and speech usage, is sent once, and still goes out (without them)
when the transport never reports; the idle sweeper's path keeps the measured figures."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from parley.calls.models import Call
from parley.calls.service import attach_voice
from parley.calls.tasks import pending_ended_events
from parley.kit.db import unit_of_work, utcnow
from parley.kit.jobs import runner_for
from parley.sessions.service import mark_voice_connected, sweep_idle
from tests.notifications.conftest import Receiver
from tests.webhooks.conftest import CALLBACK_FLOW, Platform, unique
from tests.webhooks.test_events import ALL, deliveries, events

VOICE = [
    {"turn_index": 1, "engine_ms": 3.0, "voice_to_voice_ms": 640.0, "stt_final_ms": 120.0},
    {"turn_index": 3, "engine_ms": 2.0, "voice_to_voice_ms": 720.0, "tts_first_byte_ms": 90.0},
]


async def start(platform: Platform, flow_id: str, channel: str = "phone") -> str:
    started = await platform.post("/api/sessions", {"flow_id": flow_id, "channel": channel})
    assert started.status_code == 200, started.text
    return str(started.json()["id"])


async def say(platform: Platform, session_id: str, *lines: str) -> None:
    for line in lines:
        turn = await platform.post(f"/api/sessions/{session_id}/messages", {"text": line})
        assert turn.status_code == 200, turn.text


async def voice_connected(platform: Platform, session_id: str) -> None:
    """What a voice transport does when it connects to the session."""
    async with unit_of_work(platform.database) as session:
        await mark_voice_connected(session, platform.org, session_id)


async def attach(platform: Platform, session_id: str, **figures: Any) -> Call | None:
    """What the voice transport does once the call has ended (``VoiceCall.persist``)."""
    async with unit_of_work(platform.database, jobs=runner_for(platform.app.state)) as session:
        call = await attach_voice(session, platform.org, session_id, metrics=VOICE, **figures)
    await platform.drain()
    return call


def ended_events(receiver: Receiver, path: str, session_id: str) -> list[dict[str, Any]]:
    return [
        e["data"]
        for e in events(receiver, path)
        if e["type"] == "call.ended" and e["data"]["session_id"] == session_id
    ]


async def test_console_test_conversations_send_no_events(platform: Platform, receiver: Receiver) -> None:
    path = unique("console")
    await platform.subscribe(f"{receiver.url}{path}", *ALL)
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await start(platform, flow_id, channel="test")
    await say(platform, session_id, "Ja bitte", "morgen um 10 Uhr")
    await platform.drain()

    assert receiver.at(path) == []
    assert await deliveries(platform) == []
    call = await platform.call_of(session_id)  # the record is written all the same, analysed too
    assert call["channel"] == "test" and call["signal_types"] == ["callback_requested"]
    assert call["analysis_status"] == "done"

    # the same conversation on a real channel sends every call event
    real = await start(platform, flow_id)
    await say(platform, real, "Ja bitte", "morgen um 10 Uhr")
    await platform.drain()
    kinds = sorted(e["type"] for e in events(receiver, path))
    assert kinds == ["call.analyzed", "call.ended", "call.started", "signal.raised"]


async def test_a_voice_calls_call_ended_carries_what_the_transport_measured_once(
    platform: Platform, receiver: Receiver
) -> None:
    path = unique("voice")
    await platform.subscribe(f"{receiver.url}{path}", "call.started", "call.ended")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await start(platform, flow_id)
    await voice_connected(platform, session_id)
    await say(platform, session_id, "Ja bitte", "morgen um 10 Uhr")
    await platform.drain()

    # the record is written; call.ended waits for the transport
    assert [e["type"] for e in events(receiver, path)] == ["call.started"]
    assert (await platform.call_of(session_id))["outcome"] == "completed"

    await attach(platform, session_id, tts_characters=87, stt_seconds=3.4567)
    [ended] = ended_events(receiver, path, session_id)
    assert ended["direction"] == "inbound" and ended["outcome"] == "completed"
    usage = ended["metrics"]["usage"]
    assert (usage["tts_characters"], usage["stt_seconds"]) == (87, 3.457)
    turns = {m["turn_index"]: m for m in ended["metrics"]["turns"]}
    assert turns[1]["voice_to_voice_ms"] == 640.0 and turns[3]["tts_first_byte_ms"] == 90.0
    assert ended["metrics"]["mean_voice_latency_ms"] == 680.0
    assert ended["transcript"][-1]["text"] == "Danke, auf Wiederhören."

    # a second report (a retry) and the fallback job send nothing more
    await attach(platform, session_id, tts_characters=87, stt_seconds=3.4567)
    async with unit_of_work(platform.database, write=False) as session:
        assert await pending_ended_events(session) == []
    await runner_for(platform.app.state).recover()
    await platform.drain()
    assert len(ended_events(receiver, path, session_id)) == 1
    log = await deliveries(platform, event_type="call.ended")
    assert len(log) == 1 and log[0]["status"] == "delivered"


async def test_a_voice_calls_analysis_is_sent_after_its_call_ended(
    platform: Platform, receiver: Receiver
) -> None:
    # The analysis (from the flow's variables: no model configured) is stored as soon as the record is
    # written, while call.ended still waits for the transport: call.analyzed must not come first.
    path = unique("analysed")
    await platform.subscribe(f"{receiver.url}{path}", "call.ended", "call.analyzed")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await start(platform, flow_id)
    await voice_connected(platform, session_id)
    await say(platform, session_id, "Ja bitte", "morgen um 10 Uhr")
    await platform.drain()
    assert (await platform.call_of(session_id))["analysis_status"] == "done"
    assert receiver.at(path) == []

    await attach(platform, session_id, tts_characters=87, stt_seconds=3.4567)
    sent = [e for e in events(receiver, path) if e["data"]["session_id"] == session_id]
    assert sorted(e["type"] for e in sent) == ["call.analyzed", "call.ended"]
    by_type = {e["type"]: e for e in sent}
    assert by_type["call.ended"]["created_at"] <= by_type["call.analyzed"]["created_at"]
    assert by_type["call.analyzed"]["data"]["extracted"]["preferred_time"] == "morgen um 10 Uhr"

    # a text conversation's analysis is sent as soon as it is stored, after call.ended as before
    text_session = await start(platform, flow_id)
    await say(platform, text_session, "Ja bitte", "morgen um 10 Uhr")
    await platform.drain()
    kinds = [e["type"] for e in events(receiver, path) if e["data"]["session_id"] == text_session]
    assert sorted(kinds) == ["call.analyzed", "call.ended"]


async def test_call_ended_goes_out_without_the_voice_facts_when_the_transport_never_reports(
    platform: Platform, receiver: Receiver
) -> None:
    path = unique("lost")
    await platform.subscribe(f"{receiver.url}{path}", "call.ended")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await start(platform, flow_id)
    await voice_connected(platform, session_id)
    await say(platform, session_id, "nein")
    ended = await platform.post(f"/api/sessions/{session_id}/end")
    assert ended.status_code == 200, ended.text
    await platform.drain()
    assert receiver.at(path) == []

    runner = runner_for(platform.app.state)
    async with unit_of_work(platform.database, write=False) as session:
        [pending] = await pending_ended_events(session)
    call_id = pending["call_id"]
    await runner.recover()  # within the grace the job (as after a restart) waits: nothing is sent
    await platform.drain()
    assert receiver.at(path) == []

    # the grace is over (the process that served the call is gone): sent once, without the figures
    async with unit_of_work(platform.database) as session:
        await session.execute(
            update(Call).where(Call.id == call_id).values(ended_at=utcnow() - timedelta(minutes=10))
        )
    await runner.recover()
    await platform.drain()
    [data] = ended_events(receiver, path, session_id)
    assert data["call_id"] == call_id and data["recording_url"] is None
    assert data["metrics"]["usage"]["tts_characters"] is None
    assert data["end_reason"] and data["transcript"][-1]["text"] == "Wann?"

    # a late report still completes the record, and sends nothing more
    call = await attach(platform, session_id, tts_characters=12, stt_seconds=1.0)
    assert call is not None and call.tts_characters == 12
    assert len(ended_events(receiver, path, session_id)) == 1


async def test_a_voice_call_the_idle_sweeper_ends_keeps_its_measured_figures(
    platform: Platform, receiver: Receiver
) -> None:
    path = unique("swept")
    await platform.subscribe(f"{receiver.url}{path}", "call.ended")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await start(platform, flow_id)
    await voice_connected(platform, session_id)
    await say(platform, session_id, "Ja bitte")

    runner = runner_for(platform.app.state)
    swept = await sweep_idle(platform.database, 60, now=utcnow() + timedelta(hours=1), jobs=runner)
    assert swept >= 1
    await platform.drain()
    assert receiver.at(path) == []  # the stream the sweeper stopped reports its figures next

    await attach(platform, session_id, tts_characters=40, stt_seconds=2.0, recording_filename=None)
    [data] = ended_events(receiver, path, session_id)
    assert data["outcome"] == "abandoned" and data["end_reason"] == "idle_timeout"
    assert data["metrics"]["usage"]["tts_characters"] == 40
    assert data["metrics"]["usage"]["stt_seconds"] == 2.0
    async with unit_of_work(platform.database, write=False) as session:
        stored = await session.scalar(select(Call).where(Call.session_id == session_id))
        assert stored is not None and stored.tts_characters == 40 and not stored.ended_event_pending


async def test_a_text_conversation_sends_call_ended_at_once(platform: Platform, receiver: Receiver) -> None:
    path = unique("text")
    await platform.subscribe(f"{receiver.url}{path}", "call.ended")
    session_id = await platform.converse(await platform.flow(CALLBACK_FLOW), "nein", "nie")
    [data] = ended_events(receiver, path, session_id)
    assert data["metrics"]["usage"]["tts_characters"] is None and data["recording_url"] is None
    # no transport ever reports for it; an attach (a voice client joining late) sends nothing
    await attach(platform, session_id, tts_characters=5, stt_seconds=0.5)
    assert len(ended_events(receiver, path, session_id)) == 1
