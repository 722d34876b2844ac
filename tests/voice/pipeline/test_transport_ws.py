"""``GET /api/sessions/{sessionId}/audio`` over a real server (uvicorn) with the websockets client."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from parley.kit.blobs import LocalBlobStore
from tests.notifications.conftest import Receiver, receiver  # noqa: F401  (fixture)
from tests.voice.pipeline.fakes import SILENCE, SPEECH, TONE
from tests.voice.pipeline.livevoice import (
    call_of,
    call_record_when,
    close_code,
    events_until,
    greeted,
    new_session,
    recording_of,
    rms,
    use_fakes,
    wait_ended,
)

# Order 16 in digits, as eSpeak says and PocketSphinx hears it whatever the decoder heard before
# ("one two" was cut to "one" now and then: pooled decoders carry their cepstral mean from stream to
# stream; docs/voice.md).
SPOKEN_DIGITS = "one six"


async def test_a_spoken_answer_gets_a_spoken_reply_and_the_call_is_recorded(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one two")
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    async with connect(url, additional_headers=live["headers"]) as ws:
        opening = await greeted(ws, 5)
        ready = opening[0]
        assert ready == {"type": "ready", "session_id": session_id, "sample_rate": 16000, "frame_ms": 20}
        # a voice-only client hears the flow's opening without asking
        assert opening[-1]["type"] == "agent_text" and opening[-1]["text"] == "Say your number."
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


async def test_the_organization_may_come_in_the_query_string(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio?org={live['org']}"
    async with connect(url, additional_headers={"Authorization": f"Bearer {live['token']}"}) as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000
    row = wait_ended(live, session_id)
    assert row["outcome"] == "abandoned" and row["end_reason"] == "caller_ended"


async def test_a_long_lived_credential_in_the_query_string_is_refused(live: dict[str, Any]) -> None:
    """Issue 18: login tokens and API keys leak from URLs (logs, history); only pst_ tokens go there."""
    use_fakes(live)
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    key = httpx.post(
        f"{live['url']}/api/api-keys", json={"name": "in-url", "scopes": ["write"]}, headers=live["headers"]
    )
    assert key.status_code == 200, key.text
    for credential in (live["token"], key.json()["secret"]):
        async with connect(f"{url}?token={credential}&org={live['org']}") as ws:
            assert await close_code(ws) == 4401
            assert ws.close_reason is not None
            assert "not accepted in a URL" in ws.close_reason and "audio-token" in ws.close_reason
    # the same credential in the header still works
    async with connect(url, additional_headers=live["headers"]) as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "end"}))
        assert await close_code(ws) == 1000


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
    as_reader = {"Authorization": f"Bearer {reader.json()['secret']}"}
    async with connect(url, additional_headers=as_reader) as ws:  # a viewer's key may not talk
        assert await close_code(ws) == 4403
    writer = httpx.post(keys, json={"name": "writer", "scopes": ["write"]}, headers=live["headers"])
    as_writer = {"Authorization": f"Bearer {writer.json()['secret']}"}
    async with connect(url, additional_headers=as_writer) as ws:  # an API key: its organization
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
        await greeted(ws, 5)
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
        await greeted(ws, 200)
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        audio: list[bytes] = []
        while len(audio) < 3:
            message = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(message, bytes):
                audio.append(message)
        for frame in [SPEECH] * 20:  # longer than the 300 ms a barge-in needs
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
    """eSpeak says "one six"; the socket carries it in 20 ms frames to PocketSphinx (with the collect
    node's digits as phrases), the flow answers, and eSpeak's reply comes back as audio."""
    from parley.voice.engines.espeak import EspeakTts

    caller = b"".join([c async for c in EspeakTts("en-us").synthesize(SPOKEN_DIGITS, sample_rate=16000)])
    live["app"].state.voice_engines = None  # the flow's engines: eSpeak NG, PocketSphinx, WebRTC VAD
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    audio: list[bytes] = []
    async with connect(url, additional_headers=live["headers"]) as ws:
        await greeted(ws, 1)  # the opening has begun to play: the answer interrupts it
        pcm = SILENCE * 15 + caller + SILENCE * 60
        for start in range(0, len(pcm), 640):
            await ws.send(pcm[start : start + 640])
        events = await events_until(ws, "end", audio)
        assert await close_code(ws) == 1000
    finals = [e["text"] for e in events if e["type"] == "transcript" and e["final"]]
    assert finals == [SPOKEN_DIGITS]
    replies = [e["text"] for e in events if e["type"] == "agent_text"]
    assert replies == ["Thanks, your number is 16."]
    assert [e["type"] for e in events].count("interruption") == 1
    assert len(audio) > 25 and all(len(a) == 640 for a in audio)  # at least half a second of voice
    assert any(a != bytes(640) for a in audio)
    metrics = next(e for e in events if e["type"] == "metrics")
    assert metrics["stt_final_ms"] is not None and metrics["tts_first_byte_ms"] is not None
    assert call_of(live, session_id)["outcome"] == "completed"


async def test_speech_usage_is_measured_on_the_real_engines_and_billed(live: dict[str, Any]) -> None:
    """eSpeak NG and PocketSphinx behind the real socket: the call record counts the characters the
    agent's lines sent to synthesis and the seconds of caller audio sent to recognition; billing and
    the reports add them up; a text session of the same flow has no speech usage (null, not 0)."""
    from parley.voice.engines.espeak import EspeakTts

    caller = b"".join([c async for c in EspeakTts("en-us").synthesize(SPOKEN_DIGITS, sample_rate=16000)])
    live["app"].state.voice_engines = None  # the flow's engines: eSpeak NG, PocketSphinx, WebRTC VAD
    session_id = new_session(live)
    url = f"{live['ws']}/api/sessions/{session_id}/audio"
    pcm = SILENCE * 15 + caller + SILENCE * 60
    async with connect(url, additional_headers=live["headers"]) as ws:
        opening = await greeted(ws, 1)
        for start in range(0, len(pcm), 640):
            await ws.send(pcm[start : start + 640])
        events = await events_until(ws, "end", [])
        assert await close_code(ws) == 1000
    spoken = [e["text"] for e in opening + events if e["type"] == "agent_text"]
    assert spoken == ["Say your number.", "Thanks, your number is 16."]
    call = call_record_when(live, session_id, lambda c: c["usage"]["tts_characters"] is not None)
    usage = call["usage"]
    # every character of both lines went to eSpeak (the opening too, though the answer interrupted it)
    assert usage["tts_characters"] == sum(len(text) for text in spoken) == 42
    # PocketSphinx heard at least the spoken words (the VAD trims the silence around them), and never
    # more than the socket carried
    caller_seconds, sent_seconds = len(caller) / 32000, len(pcm) / 32000
    assert 0.8 * caller_seconds <= usage["stt_seconds"] <= sent_seconds, (usage, caller_seconds)

    text_session = httpx.post(
        f"{live['url']}/api/sessions", json={"flow_id": live["flow"]}, headers=live["headers"]
    ).json()
    said = httpx.post(
        f"{live['url']}/api/sessions/{text_session['id']}/messages",
        json={"text": "12"},
        headers=live["headers"],
    )
    assert said.status_code == 200 and said.json()["status"] == "ended", said.text
    text_usage = call_of(live, text_session["id"])["usage"]
    assert (text_usage["tts_characters"], text_usage["stt_seconds"]) == (None, None)

    billed = httpx.get(f"{live['url']}/api/billing/usage", headers=live["headers"]).json()["totals"]
    calls = httpx.get(f"{live['url']}/api/calls", params={"limit": 100}, headers=live["headers"]).json()
    records = [
        httpx.get(f"{live['url']}/api/calls/{c['id']}", headers=live["headers"]).json()["usage"]
        for c in calls["items"]
    ]
    voiced = [u for u in records if u["tts_characters"] is not None]
    assert billed["voice_calls"] == len(voiced) >= 1
    assert billed["tts_characters"] == sum(u["tts_characters"] for u in voiced) >= 42
    assert billed["stt_seconds"] == pytest.approx(sum(u["stt_seconds"] for u in voiced), abs=0.01)
    days = httpx.get(f"{live['url']}/api/reporting/calls/summary", headers=live["headers"]).json()["days"]
    assert sum(d["tts_characters"] or 0 for d in days) == billed["tts_characters"]
    assert sum(d["voice_calls"] for d in days) == billed["voice_calls"]


def has_voice_metrics(call: dict[str, Any]) -> bool:
    return any(m.get("voice_to_voice_ms") is not None for m in call["turn_metrics"])


async def answer_once(live: dict[str, Any]) -> dict[str, Any]:
    """One spoken answer that ends the digits flow; the call record once its voice metrics are on."""
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 5)
        for frame in [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        await events_until(ws, "end")
        await close_code(ws)
    return call_record_when(live, session_id, has_voice_metrics)


async def test_the_call_record_gets_the_stereo_recording_and_the_voice_metrics(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one two")
    fakes.tts.pcm, fakes.tts.frames = TONE, 25  # half a second of a 400 Hz tone
    session_id = new_session(live)
    async with connect(
        f"{live['ws']}/api/sessions/{session_id}/audio", additional_headers=live["headers"]
    ) as ws:
        await greeted(ws, 25)
        # silence while the agent's opening (half a second) plays, then 200 ms of speech
        for frame in [SILENCE] * 35 + [SPEECH] * 10 + [SILENCE] * 40:
            await ws.send(frame)
        audio: list[bytes] = []
        events = await events_until(ws, "end", audio)
        await close_code(ws)
    assert len(audio) == 25
    live_metrics = next(e for e in events if e["type"] == "metrics")
    call = call_record_when(live, session_id, lambda c: c["recording_url"] is not None)
    # per-turn voice metrics, on the turn's entry (turn 0 is the flow's opening, turn 1 the answer)
    assert [m["turn_index"] for m in call["turn_metrics"]] == [0, 1]
    opening, answer = call["turn_metrics"]
    assert opening["voice_to_voice_ms"] is None and opening["stt_final_ms"] is None
    for key in ("stt_final_ms", "stt_engine_ms", "tts_first_byte_ms", "voice_to_voice_ms", "hangover_ms"):
        assert answer[key] is not None and answer[key] >= 0, key
        assert answer[key] == live_metrics[key]
    # the caller waited the hangover and the work after it: voice to voice counts from the last voice
    assert answer["voice_to_voice_ms"] >= answer["hangover_ms"]
    assert answer["engine_ms"] >= 0 and answer["interrupted"] is False
    assert answer["llm_first_token_ms"] is None  # the digits flow uses no LLM
    assert call["mean_voice_latency_ms"] == answer["voice_to_voice_ms"]
    assert call["recording_url"] == f"/api/calls/recording-file/{session_id}.wav"
    params, samples = recording_of(live, call)
    assert (params.nchannels, params.sampwidth, params.framerate) == (2, 2, 16000)
    left, right = samples[:, 0], samples[:, 1]
    # the opening first, on the right, while the caller is silent
    assert rms(right[:8000]) > 4000 and rms(left[:8000]) == 0
    # the caller's 200 ms of speech after 700 ms of silence, on the left only
    assert rms(left[11200:14400]) > 9000 and rms(right[11200:14400]) == 0
    assert rms(left[:11200]) == 0
    # the agent's answer, on the right, after the caller's speech and its end, the left silent there
    speaking = np.flatnonzero(right[14400:]) + 14400
    assert speaking.size > 0 and speaking[0] >= 14400 + 9600  # at least 600 ms of silence after the speech
    assert speaking[-1] - speaking[0] < 8000 + 320
    assert rms(right[speaking[0] : speaking[-1]]) > 4000 and rms(left[speaking[0] : speaking[-1]]) == 0
    assert len(samples) == speaking[-1] + 1 or rms(samples[speaking[-1] + 1 :]) == 0


async def test_a_failing_blob_store_costs_the_recording_not_the_call_record(
    live: dict[str, Any], tmp_path: Path
) -> None:
    use_fakes(live, "three")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the blob directory should be")
    blobs = live["app"].state.blobs
    live["app"].state.blobs = LocalBlobStore(blocker)
    try:
        call = await answer_once(live)
    finally:
        live["app"].state.blobs = blobs
    assert call["outcome"] == "completed" and call["recording_url"] is None
    assert call["turn_metrics"][1]["voice_to_voice_ms"] is not None


async def test_recording_can_be_switched_off(live: dict[str, Any]) -> None:
    use_fakes(live, "four")
    settings = live["app"].state.settings
    before = settings.voice_recording_max_seconds
    settings.voice_recording_max_seconds = 0
    try:
        call = await answer_once(live)
    finally:
        settings.voice_recording_max_seconds = before
    assert call["recording_url"] is None


def call_events_when(hooks: Receiver, path: str, ready: Any) -> list[dict[str, Any]]:
    """The call events the local receiver got at ``path`` once ``ready(events)`` holds."""
    deadline = time.monotonic() + 10
    while True:
        got = [json.loads(r.body) for r in hooks.at(path)]
        if ready(got):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


async def test_call_ended_carries_the_recording_voice_figures_and_speech_usage_once(
    live: dict[str, Any],
    receiver: Receiver,  # noqa: F811
) -> None:
    path = f"/hook/flaky/voice-ws-{uuid4().hex[:8]}"
    subscribed = httpx.post(
        f"{live['url']}/api/webhooks/subscriptions",
        json={
            "url": receiver.url + path,
            "event_types": ["call.ended"],
            "secret": "whsec_voice_ws_events_0123",
        },
        headers=live["headers"],
    )
    assert subscribed.status_code == 200, subscribed.text
    try:
        use_fakes(live, "one two")
        call = await answer_once(live)
        [event] = call_events_when(receiver, path, lambda got: len(got) >= 1)
        ended = event["data"]
        assert ended["session_id"] == call["session_id"] and ended["call_id"] == call["id"]
        assert ended["direction"] == "inbound" and ended["outcome"] == "completed"
        # what the caller experienced, as the call record has it once the transport attached it
        assert ended["recording_url"] == call["recording_url"] is not None
        answer = ended["metrics"]["turns"][1]
        assert answer["voice_to_voice_ms"] is not None and answer["stt_final_ms"] is not None
        assert ended["metrics"]["mean_voice_latency_ms"] == call["mean_voice_latency_ms"] is not None
        usage = ended["metrics"]["usage"]
        assert usage["tts_characters"] == call["usage"]["tts_characters"] is not None
        assert usage["stt_seconds"] == call["usage"]["stt_seconds"] is not None
        # once: the delivery log holds one call.ended for the session
        log = httpx.get(
            f"{live['url']}/api/webhooks/deliveries",
            params={"event_type": "call.ended", "subscription_id": subscribed.json()["id"]},
            headers=live["headers"],
        ).json()["items"]
        assert len(log) == 1
    finally:
        httpx.delete(
            f"{live['url']}/api/webhooks/subscriptions/{subscribed.json()['id']}", headers=live["headers"]
        )


# Real-time audio: run in a process of its own (make test), where no earlier test's threads compete.
pytestmark = pytest.mark.realtime
