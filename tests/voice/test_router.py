"""POST /api/inference/tts and /api/inference/stt: offline engines by default, vendors when configured."""

from __future__ import annotations

import io
import wave
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from parley.voice.audio import read_wav, write_wav
from tests.conftest import auth, make_token
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.voice.stubs import SPEECH_SECONDS, VendorState, make_vendor_stub

Client = tuple[httpx.AsyncClient, dict[str, str]]


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, VendorState]]:
    state = VendorState()
    with serve_in_thread(make_vendor_stub(state)) as url:
        yield url, state


@pytest.fixture
async def api(settings: Settings, database: Database) -> AsyncIterator[Client]:
    settings.outbound_allowlist = ["127.0.0.1"]
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        org = await create_org(client)
        yield client, auth(ALICE, str(org["id"]))


async def tts(client: httpx.AsyncClient, headers: dict[str, str], **body: object) -> httpx.Response:
    return await client.post("/api/inference/tts", json=body, headers=headers)


async def stt(
    client: httpx.AsyncClient, headers: dict[str, str], audio: bytes, **fields: str | list[str]
) -> httpx.Response:
    return await client.post(
        "/api/inference/stt", files={"file": ("speech.wav", audio, "audio/wav")}, data=fields, headers=headers
    )


async def test_tts_speaks_with_espeak_by_default_as_wav(api: Client) -> None:
    client, headers = api
    response = await tts(client, headers, text="Your car is ready.", language="en", sample_rate=22050)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    assert response.headers["x-provider"] == "espeak"
    wav = read_wav(response.content)
    assert wav.sample_rate == 22050 and 0.5 < wav.duration_seconds < 4
    assert float(response.headers["x-audio-seconds"]) == pytest.approx(wav.duration_seconds, abs=0.01)

    raw = await tts(
        client, headers, text="Ihr Auto ist fertig.", voice="de", format="pcm16", sample_rate=8000
    )
    assert raw.status_code == 200
    assert (
        raw.headers["content-type"] == "application/octet-stream" and raw.headers["x-sample-rate"] == "8000"
    )
    assert len(raw.content) % 2 == 0 and len(raw.content) > 8000


async def test_tts_round_trips_through_stt(api: Client) -> None:
    client, headers = api
    spoken = await tts(client, headers, text="one two three four", voice="en-us", sample_rate=16000)
    digits = "zero one two three four five six seven eight nine"
    response = await stt(client, headers, spoken.content, language="en", phrases=[digits])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["provider"] == "pocketsphinx" and body["language"] == "en"
    assert sum(1 for word in ["one", "two", "three", "four"] if word in body["text"].split()) >= 3
    assert body["duration_seconds"] == pytest.approx(read_wav(spoken.content).duration_seconds, abs=0.001)
    segment = body["segments"][0]
    assert segment["words"] and segment["start_ms"] < segment["end_ms"]


async def test_tts_validation_and_choices(api: Client) -> None:
    client, headers = api
    assert (await tts(client, headers, text="")).status_code == 422
    assert (await tts(client, headers, text="x" * 2001)).status_code == 422
    assert (await tts(client, headers, text="hi", sample_rate=44100)).status_code == 422
    wrong_kind = await tts(client, headers, text="hi", provider="openai")
    assert wrong_kind.status_code == 400
    assert "not a text-to-speech provider" in wrong_kind.json()["detail"]
    no_voice = await tts(client, headers, text="hi", voice="xx-nope")
    assert no_voice.status_code == 400 and "no voice" in no_voice.json()["detail"]
    unconfigured = await tts(client, headers, text="hi", provider="elevenlabs")
    assert unconfigured.status_code == 409 and unconfigured.json()["code"] == "provider_not_configured"
    assert "PUT /api/providers/elevenlabs/config" in unconfigured.json()["detail"]


async def test_viewers_may_not_run_inference(api: Client) -> None:
    client, headers = api
    org_id = headers["X-Organization-Id"]
    viewer = make_token("vera", email="vera@example.com", name="Vera")
    await client.get("/api/me", headers=auth(viewer))
    added = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "vera", "role": "viewer"}, headers=headers
    )
    assert added.status_code == 200, added.text
    response = await tts(client, auth(viewer, org_id), text="hello")
    assert response.status_code == 403


async def test_stt_refuses_what_it_cannot_read(api: Client) -> None:
    client, headers = api
    not_wav = await stt(client, headers, b"ID3\x04 an mp3 file")
    assert not_wav.status_code == 415 and "PCM WAV" in not_wav.json()["detail"]
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:  # 24-bit samples
        writer.setnchannels(1)
        writer.setsampwidth(3)
        writer.setframerate(16000)
        writer.writeframes(b"\0" * 300)
    assert (await stt(client, headers, buffer.getvalue())).status_code == 415
    too_long = await stt(client, headers, write_wav(b"\0" * 2 * 4000 * 61, 4000))
    assert too_long.status_code == 413 and "at most 60 s" in too_long.json()["detail"]
    french = await stt(client, headers, write_wav(b"\0" * 3200, 16000), language="fr")
    assert french.status_code == 400 and "cannot hear 'fr'" in french.json()["detail"]
    german = await stt(client, headers, write_wav(b"\0" * 3200, 16000), language="de")
    assert german.status_code == 200  # German through the German lexicon on the bundled model
    silence = await stt(client, headers, write_wav(b"\0" * 32000, 8000))
    assert silence.status_code == 200
    assert silence.json() == {
        "text": "",
        "segments": [],
        "duration_seconds": 2.0,
        "provider": "pocketsphinx",
        "language": None,
    }


async def test_configured_vendors_are_used(api: Client, vendor: tuple[str, VendorState]) -> None:
    client, headers = api
    url, state = vendor
    for key, config in (
        ("elevenlabs", {"api_key": "xi-key", "base_url": url}),
        ("openai_stt", {"api_key": "sk-stt", "base_url": f"{url}/v1"}),
    ):
        put = await client.put(f"/api/providers/{key}/config", json=config, headers=headers)
        assert put.status_code == 200, put.text

    spoken = await tts(client, headers, text="Hallo", sample_rate=16000)  # the configured vendor wins
    assert spoken.status_code == 200 and spoken.headers["x-provider"] == "elevenlabs"
    assert read_wav(spoken.content).duration_seconds == pytest.approx(SPEECH_SECONDS, abs=0.01)
    offline = await tts(client, headers, text="Hallo", provider="espeak")
    assert offline.headers["x-provider"] == "espeak"

    heard = await stt(client, headers, spoken.content, language="de")
    assert heard.status_code == 200, heard.text
    assert heard.json()["text"] == "where is my car" and heard.json()["provider"] == "openai_stt"

    state.fail_status = 401
    try:
        failed = await stt(client, headers, spoken.content, language="de")
    finally:
        state.fail_status = None
    assert failed.status_code == 502 and "refused the credentials" in failed.json()["detail"]
    assert "sk-stt" not in failed.text
