"""Vendor adapters against local servers speaking the vendors' protocols, through the guarded client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from parley.kit.outbound import OutboundPolicy
from parley.providers.catalog import DeepgramConfig, ElevenLabsConfig, OpenAISTTConfig, OpenAITTSConfig
from parley.voice.engines.base import Transcript, VendorError, VendorTimeout
from parley.voice.engines.deepgram import DeepgramStt
from parley.voice.engines.vendors import ElevenLabsTts, OpenAIStt, OpenAITts
from tests.live import serve_in_thread
from tests.voice.stubs import (
    SPEECH_SECONDS,
    DeepgramState,
    VendorState,
    deepgram_stub,
    make_vendor_stub,
    tone,
)

LOOPBACK = OutboundPolicy.from_entries(["127.0.0.1"])
PUBLIC_ONLY = OutboundPolicy.from_entries([])


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, VendorState]]:
    state = VendorState()
    with serve_in_thread(make_vendor_stub(state)) as url:
        yield url, state


@pytest.fixture
def state(vendor: tuple[str, VendorState]) -> Iterator[VendorState]:
    vendor[1].requests.clear()
    yield vendor[1]
    vendor[1].fail_status = None
    vendor[1].hang_seconds = 0.0


def openai_tts(url: str, policy: OutboundPolicy = LOOPBACK, timeout: float = 5.0) -> OpenAITts:
    config = OpenAITTSConfig(api_key=SecretStr("sk-tts"), base_url=f"{url}/v1", voice="nova")
    return OpenAITts(config, policy, timeout)


async def collect(engine: OpenAITts | ElevenLabsTts, rate: int, **kwargs: str) -> bytes:
    return b"".join([c async for c in engine.synthesize("Hello there", sample_rate=rate, **kwargs)])


async def test_openai_speech_streams_pcm_resampled(
    vendor: tuple[str, VendorState], state: VendorState
) -> None:
    audio = await collect(openai_tts(vendor[0]), 8000)
    assert len(audio) / 2 / 8000 == pytest.approx(SPEECH_SECONDS, abs=0.01)
    request = state.requests[-1]
    assert request["path"] == "/v1/audio/speech" and request["auth"] == "Bearer sk-tts"
    assert request["body"] == {
        "model": "tts-1",
        "input": "Hello there",
        "voice": "nova",
        "response_format": "pcm",
    }


async def test_elevenlabs_streams_pcm_16000(vendor: tuple[str, VendorState], state: VendorState) -> None:
    config = ElevenLabsConfig(api_key=SecretStr("xi-secret"), base_url=vendor[0])
    audio = await collect(ElevenLabsTts(config, LOOPBACK, 5.0), 16000, voice="abc123", language="de-DE")
    assert len(audio) == len(tone(16000))
    request = state.requests[-1]
    assert request["path"] == "/v1/text-to-speech/abc123/stream"
    assert request["xi"] == "xi-secret" and request["format"] == "pcm_16000"
    assert request["body"] == {
        "text": "Hello there",
        "model_id": "eleven_multilingual_v2",
        "language_code": "de",
    }


async def test_vendor_failures_are_502_and_504_with_a_sentence(
    vendor: tuple[str, VendorState], state: VendorState
) -> None:
    state.fail_status = 401
    with pytest.raises(VendorError, match=r"refused the credentials \(HTTP 401\)"):
        await collect(openai_tts(vendor[0]), 16000)
    state.fail_status = 500
    with pytest.raises(VendorError, match="answered HTTP 500"):
        await collect(openai_tts(vendor[0]), 16000)
    state.fail_status = None
    state.hang_seconds = 1.0
    with pytest.raises(VendorTimeout, match="did not answer in time"):
        await collect(openai_tts(vendor[0], timeout=0.2), 16000)


async def test_loopback_is_refused_unless_allow_listed(vendor: tuple[str, VendorState]) -> None:
    with pytest.raises(VendorError, match="non-public address"):
        await collect(openai_tts(vendor[0], policy=PUBLIC_ONLY), 16000)


async def test_openai_transcription_uploads_a_wav(
    vendor: tuple[str, VendorState], state: VendorState
) -> None:
    config = OpenAISTTConfig(api_key=SecretStr("sk-stt"), base_url=f"{vendor[0]}/v1")
    stream = await OpenAIStt(config, LOOPBACK, 5.0).open_stream("de-DE", 8000, phrases=["Auftrag"])

    async def read() -> list[Transcript]:
        return [t async for t in stream]

    reader = asyncio.create_task(read())  # a live pipeline reads while it feeds
    audio = tone(8000)
    for offset in range(0, len(audio), 320):
        stream.feed(audio[offset : offset + 320])
        await asyncio.sleep(0)
    assert not reader.done()
    await stream.finish()
    results = await reader
    assert results == [Transcript("where is my car", True, 0, int(SPEECH_SECONDS * 1000))]
    request = state.requests[-1]
    assert request["auth"] == "Bearer sk-stt" and request["model"] == "whisper-1"
    assert request["language"] == "de" and request["prompt"] == "Auftrag"
    assert request["riff"] and request["file_bytes"] == len(audio) + 44


async def test_deepgram_streams_interim_and_final_results() -> None:
    state = DeepgramState()
    with deepgram_stub(state) as url:
        config = DeepgramConfig(api_key=SecretStr("dg-secret"), base_url=url)
        stream = await DeepgramStt(config, LOOPBACK, 5.0).open_stream("en", 16000, phrases=["car"])
        audio = tone(16000, seconds=2.2)
        for offset in range(0, len(audio), 3200):
            stream.feed(audio[offset : offset + 3200])
        await stream.finish()
        results = [t async for t in stream]
        await stream.aclose()
    assert [t.is_final for t in results] == [False, False, True]
    assert results[-1].text == "where is my car" and results[-1].end_ms == 2200
    assert [w.text for w in results[-1].words] == ["where", "is", "my", "car"]
    connection = state.connections[0]
    assert connection["auth"] == "Token dg-secret" and connection["closed_stream"]
    assert connection["bytes"] == len(audio)
    assert "/v1/listen?encoding=linear16&sample_rate=16000" in connection["path"]
    assert "interim_results=true" in connection["path"] and "keywords=car" in connection["path"]


async def test_deepgram_refusal_and_guard() -> None:
    state = DeepgramState(reject_status=401)
    with deepgram_stub(state) as url:
        config = DeepgramConfig(api_key=SecretStr("dg-wrong"), base_url=url)
        with pytest.raises(VendorError, match=r"refused the credentials \(HTTP 401\)"):
            await DeepgramStt(config, LOOPBACK, 5.0).open_stream(None, 16000)
        with pytest.raises(VendorError, match="non-public address"):
            await DeepgramStt(config, PUBLIC_ONLY, 5.0).open_stream(None, 16000)
    assert state.connections == []
