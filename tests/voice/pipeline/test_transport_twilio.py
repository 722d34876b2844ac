"""``GET /api/telephony/twilio/media`` over a real server, with a websockets client that speaks like
Twilio Media Streams: ``connected``, ``start`` (stream token in ``customParameters``), 20 ms base64
μ-law ``media`` chunks at 8 kHz, marks echoed back once "played", ``stop`` on hang-up."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from parley.auth.stream_tokens import issue_stream_token
from parley.voice.audio import mulaw_to_pcm16, pcm16_to_mulaw
from tests.voice.pipeline.fakes import TONE
from tests.voice.pipeline.livevoice import (
    call_record_when,
    flow_with,
    new_session,
    recording_of,
    rms,
    use_fakes,
    wait_ended,
)

SPEECH_8K = b"\x10\x27" * 160  # 20 ms at 8 kHz, sample 10000
SILENCE_8K = b"\x00\x00" * 160
FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


def stream_token(live: dict[str, Any], session_id: str, purpose: str = "twilio-media") -> str:
    token, _ = issue_stream_token(
        live["app"].state.settings,
        organization_id=live["org"],
        session_id=session_id,
        issued_by="twilio",
        purpose=purpose,  # type: ignore[arg-type]
    )
    return token


class FakeTwilio:
    """The Twilio side of a media stream: sends like Twilio, collects what Parley sends back."""

    def __init__(self, ws: ClientConnection, stream_sid: str = "MZ0123456789abcdef") -> None:
        self.ws = ws
        self.stream_sid = stream_sid
        self.sequence = 0
        self.chunk = 0
        self.received: list[dict[str, Any]] = []
        self.echo_marks = True

    async def send(self, event: str, **fields: Any) -> None:
        self.sequence += 1
        await self.ws.send(json.dumps({"event": event, "sequenceNumber": str(self.sequence), **fields}))

    async def connected(self) -> None:
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))

    async def start(self, token: str | None, media_format: dict[str, Any] | None = None) -> None:
        await self.connected()
        parameters = {"token": token} if token is not None else {}
        await self.send(
            "start",
            streamSid=self.stream_sid,
            start={
                "accountSid": "AC0123",
                "streamSid": self.stream_sid,
                "callSid": "CA0123",
                "tracks": ["inbound"],
                "customParameters": parameters,
                "mediaFormat": media_format or FORMAT,
            },
        )

    async def media(self, pcm8k: bytes) -> None:
        for start in range(0, len(pcm8k), 320):
            self.chunk += 1
            payload = base64.b64encode(pcm16_to_mulaw(pcm8k[start : start + 320])).decode()
            await self.send(
                "media",
                streamSid=self.stream_sid,
                media={
                    "track": "inbound",
                    "chunk": str(self.chunk),
                    "timestamp": str(self.chunk * 20),
                    "payload": payload,
                },
            )

    async def stop(self) -> None:
        await self.send("stop", streamSid=self.stream_sid, stop={"accountSid": "AC0123", "callSid": "CA0123"})

    async def next(self) -> dict[str, Any]:
        message = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
        assert message["streamSid"] == self.stream_sid, message
        self.received.append(message)
        if message["event"] == "mark" and self.echo_marks:  # "played": Twilio echoes the mark
            await self.send("mark", streamSid=self.stream_sid, mark=message["mark"])
        return dict(message)

    async def until(self, event: str, name: str | None = None) -> list[dict[str, Any]]:
        seen = []
        while True:
            message = await self.next()
            seen.append(message)
            if message["event"] == event and (name is None or message["mark"]["name"] == name):
                return seen

    async def closed(self) -> tuple[int | None, str | None]:
        with pytest.raises(ConnectionClosed):
            while True:
                await self.next()
        return self.ws.close_code, self.ws.close_reason

    def audio(self, messages: list[dict[str, Any]] | None = None) -> bytes:
        """The agent's audio in ``messages`` (default: all received) as 8 kHz PCM16."""
        media = [m for m in (messages or self.received) if m["event"] == "media"]
        return b"".join(mulaw_to_pcm16(base64.b64decode(m["media"]["payload"])) for m in media)


def media_url(live: dict[str, Any]) -> str:
    return f"{live['ws']}/api/telephony/twilio/media"


async def closed_after(
    live: dict[str, Any], token: str | None, media_format: dict[str, Any] | None = None, garbage: int = 0
) -> tuple[int | None, str | None]:
    """Start a stream (then send ``garbage`` text); how the server closed it."""
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(token, media_format)
        for _ in range(garbage):
            await ws.send("garbage")
        return await twilio.closed()


async def test_a_twilio_call_is_greeted_answered_marked_recorded_and_measured(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one two")
    fakes.tts.pcm = TONE
    session_id = new_session(live, channel="phone")
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, session_id))
        # the flow's opening is spoken (a phone caller cannot read it), then marked
        greeting = await twilio.until("mark")
        assert greeting[-1]["mark"]["name"].startswith("turn-0-")
        assert fakes.tts.texts == ["Say your number."]
        heard = twilio.audio(greeting)
        assert len(heard) == 5 * 160 * 2  # five 20 ms frames at 16 kHz became 8 kHz μ-law
        assert rms(np.frombuffer(heard, dtype="<i2")) > 3000
        # the caller answers once the greeting has played (not over it: that would be a barge-in),
        # in 20 ms chunks, with Twilio's continuous silence around it
        await asyncio.sleep(0.3)
        await twilio.media(SILENCE_8K * 10 + SPEECH_8K * 10 + SILENCE_8K * 40)
        answer = await twilio.until("mark", "end")
        assert await twilio.closed() == (1000, "")
    assert fakes.tts.texts[-1] == "Thanks, your number is 12."
    events = [m["event"] for m in answer]
    assert "clear" not in events
    assert events[-2:] == ["mark", "mark"] and answer[-2]["mark"]["name"].startswith("turn-1-")
    assert len(twilio.audio(answer)) == 5 * 160 * 2
    assert all(set(m) == {"event", "streamSid", "media"} for m in answer if m["event"] == "media")
    row = wait_ended(live, session_id)
    assert row["variables"]["number"] == "12" and row["outcome"] == "completed"
    call = call_record_when(live, session_id, lambda c: c["recording_url"] is not None)
    assert call["channel"] == "phone"
    answer_metrics = call["turn_metrics"][1]
    for key in ("stt_final_ms", "stt_engine_ms", "tts_first_byte_ms", "voice_to_voice_ms"):
        assert answer_metrics[key] is not None, key
    # the recording: 8 kHz stereo, the caller left, the agent right, one timeline
    params, samples = recording_of(live, call)
    assert (params.nchannels, params.framerate) == (2, 8000)
    left, right = samples[:, 0], samples[:, 1]
    assert rms(left[1600:3200]) > 9000  # the caller's 200 ms after 200 ms of silence
    assert rms(right[1600:3200]) == 0
    agent = np.flatnonzero(right)
    greeting_end = 5 * 160 + 64  # the greeting at the start (plus the resampler's tail)
    assert agent[0] < 100 and rms(right[: 5 * 160]) > 3000
    reply = agent[agent > greeting_end]
    assert reply.size and reply[0] >= 50 * 160  # the reply after the speech and 600 ms of silence
    assert rms(right[reply[0] : reply[-1]]) > 3000 and rms(left[reply[0] : reply[-1]]) == 0


async def test_barge_in_clears_twilio_and_cuts_the_recording(live: dict[str, Any]) -> None:
    fakes = use_fakes(live, "one")
    fakes.tts.pcm, fakes.tts.frames = TONE, 100  # two seconds of agent audio, paced in real time
    session_id = new_session(live, channel="phone")
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, session_id))
        speak = asyncio.Event()
        sent = 0

        async def caller() -> None:  # like Twilio: a 20 ms chunk every 20 ms, 200 ms of speech
            nonlocal sent
            spoken = 0
            for _ in range(500):
                talking = speak.is_set() and spoken < 10
                spoken += talking
                await twilio.media(SPEECH_8K if talking else SILENCE_8K)
                sent += 1
                await asyncio.sleep(0.02)

        sending = asyncio.create_task(caller())
        media = 0
        while media < 10:  # the greeting is playing; the caller speaks over it
            media += (await twilio.next())["event"] == "media"
        speak.set()
        interrupted = await twilio.until("clear")
        caller_at_clear = sent * 160  # samples the caller had sent when the clear came
        assert all(m["event"] == "media" for m in interrupted[:-1])
        sent_before_clear = len(twilio.audio()) // 2
        rest = await twilio.until("mark", "end")
        sending.cancel()
        # no more of the interrupted greeting after the clear: the next audio is the answer (turn 1)
        assert not any(m["event"] == "mark" and m["mark"]["name"].startswith("turn-0-") for m in rest)
        await twilio.closed()
    assert sent_before_clear < 100 * 160
    assert fakes.tts.texts == ["Say your number.", "Thanks, your number is 1."]
    call = call_record_when(live, session_id, lambda c: c["recording_url"] is not None)
    _, samples = recording_of(live, call)
    left, right = samples[:, 0], samples[:, 1]
    speech = np.flatnonzero(left)
    agent = np.flatnonzero(right)
    greeting = agent[agent < speech[-1]]
    # the greeting is cut where the caller barged in: nothing of it after the caller's position then
    assert greeting.size > 0 and greeting[-1] <= caller_at_clear + 64
    # the answer, after the caller's speech, whole (2 s)
    answer = agent[agent > speech[-1]]
    assert answer.size > 0 and answer[-1] - answer[0] > 95 * 160
    assert rms(left[answer[0] : answer[-1]]) == 0


async def test_a_silent_hang_up_ends_the_session_and_bad_messages_are_skipped(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live, channel="phone")
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, session_id))
        await twilio.until("mark")
        await ws.send("this is not JSON")
        await twilio.send("dance", streamSid=twilio.stream_sid)
        await twilio.send("media", streamSid=twilio.stream_sid, media={"track": "inbound", "payload": "%%%"})
        await twilio.send("dtmf", streamSid=twilio.stream_sid, dtmf={"track": "inbound_track", "digit": "5"})
        await twilio.media(SILENCE_8K * 5)  # still listening
        await twilio.stop()
        assert (await twilio.closed())[0] == 1000
    row = wait_ended(live, session_id)
    assert (row["outcome"], row["end_reason"]) == ("abandoned", "caller_hung_up")
    call = call_record_when(live, session_id, lambda c: c["recording_url"] is not None)
    assert call["outcome"] == "abandoned"


async def test_a_dropped_socket_ends_the_session_and_a_flood_of_garbage_closes_it(
    live: dict[str, Any],
) -> None:
    use_fakes(live)
    dropped = new_session(live, channel="phone")
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, dropped))
        await twilio.media(SILENCE_8K * 5)
    assert wait_ended(live, dropped)["end_reason"] == "caller_hung_up"
    assert call_record_when(live, dropped)["outcome"] == "abandoned"

    flooded = new_session(live, channel="phone")
    code, reason = await closed_after(live, stream_token(live, flooded), garbage=20)
    assert code == 1007 and "malformed" in (reason or "")
    assert wait_ended(live, flooded)["outcome"] == "abandoned"
    assert call_record_when(live, flooded)["session_id"] == flooded


async def test_a_wrong_media_format_closes_with_a_reason_and_the_call_is_recorded(
    live: dict[str, Any],
) -> None:
    use_fakes(live)
    session_id = new_session(live, channel="phone")
    l16 = {"encoding": "audio/l16", "sampleRate": 16000, "channels": 1}
    code, reason = await closed_after(live, stream_token(live, session_id), l16)
    assert code == 1003 and "audio/x-mulaw 8000 Hz" in (reason or "")
    row = wait_ended(live, session_id)
    assert (row["outcome"], row["end_reason"]) == ("failed", "unsupported_media_format")
    assert call_record_when(live, session_id)["outcome"] == "failed"


@pytest.mark.parametrize(
    ("messages", "code", "reason"),
    [
        ([{"event": "connected"}, {"event": "media", "media": {"payload": ""}}], 1008, "Expected 'start'"),
        (["not json"], 1007, "JSON"),
        ([b"\x00\x01"], 1007, "JSON"),
        ([{"event": "start", "start": {"customParameters": {}}}], 1008, "streamSid"),
    ],
)
async def test_protocol_errors_before_start_close_with_a_reason(
    live: dict[str, Any], messages: list[Any], code: int, reason: str
) -> None:
    async with connect(media_url(live)) as ws:
        for message in messages:
            await ws.send(message if isinstance(message, str | bytes) else json.dumps(message))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == code and reason in (ws.close_reason or "")


async def test_the_stream_token_is_checked(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live, channel="phone")
    audio_token = stream_token(live, session_id, purpose="audio")
    for token, expected in [
        (None, "no 'token'"),
        ("pst_forged", "not valid"),
        (live["token"], "Not a stream token"),  # a login token is not a stream token
        (audio_token, "something else"),  # a browser's audio token cannot open a phone stream
    ]:
        code, reason = await closed_after(live, token)
        assert code == 1008 and expected in (reason or ""), reason
    ended = httpx.post(f"{live['url']}/api/sessions/{session_id}/end", headers=live["headers"])
    assert ended.status_code == 200
    assert (await closed_after(live, stream_token(live, session_id)))[0] == 4409


async def test_one_session_takes_one_media_stream_at_a_time(live: dict[str, Any]) -> None:
    use_fakes(live)
    session_id = new_session(live, channel="phone")
    token = stream_token(live, session_id)
    async with connect(media_url(live)) as first:
        await FakeTwilio(first).start(token)
        await FakeTwilio(first).until("mark")
        code, reason = await closed_after(live, token)
        assert code == 4409 and "already" in (reason or "")
        await FakeTwilio(first).stop()
    assert wait_ended(live, session_id)["status"] == "ended"


async def test_telephone_keys_up_to_hash_are_the_callers_answer(live: dict[str, Any]) -> None:
    fakes = use_fakes(live)
    session_id = new_session(live, channel="phone")
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, session_id))
        await twilio.until("mark")
        for key in ["4", "2", "x", "#"]:  # "x" is no key: skipped
            await twilio.send(
                "dtmf", streamSid=twilio.stream_sid, dtmf={"track": "inbound_track", "digit": key}
            )
        await twilio.until("mark", "end")
        await twilio.closed()
    assert fakes.tts.texts[-1] == "Thanks, your number is 42."
    row = wait_ended(live, session_id)
    assert row["variables"]["number"] == "42" and row["outcome"] == "completed"
    call = call_record_when(live, session_id, lambda c: c["recording_url"] is not None)
    answer = call["turn_metrics"][1]
    assert answer["voice_to_voice_ms"] is not None and answer["stt_final_ms"] is None


async def test_a_silent_phone_caller_is_prompted_then_told_goodbye_and_hung_up(live: dict[str, Any]) -> None:
    use_fakes(live)
    flow = flow_with(live, "Silent phone", reprompt_after_ms=300, max_reprompts=1)
    session_id = new_session(live, channel="phone", flow=flow)
    async with connect(media_url(live)) as ws:
        twilio = FakeTwilio(ws)
        await twilio.start(stream_token(live, session_id))
        await twilio.until("mark", "end")  # opening, re-prompt, goodbye; then the end mark
        code, _ = await twilio.closed()
    assert code == 1000
    marks = [m["mark"]["name"] for m in twilio.received if m["event"] == "mark"]
    assert len(marks) == 5 and marks[-1] == "end"  # greeting, re-prompt (2 lines), goodbye, end
    assert twilio.audio()  # each was spoken
    row = wait_ended(live, session_id)
    assert (row["outcome"], row["end_reason"]) == ("abandoned", "caller_silent")
    assert call_record_when(live, session_id)["outcome"] == "abandoned"


# Real-time audio: run in a process of its own (make test), where no earlier test's threads compete.
pytestmark = pytest.mark.realtime
