"""Vendor speech engines over HTTP: OpenAI (speech and transcriptions) and ElevenLabs (streaming speech).

Every call goes through the SSRF-guarded client. Failures become :class:`VendorError` (502) or
:class:`VendorTimeout` (504) with a sentence naming the vendor and the cause, never a secret.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import orjson

from parley.kit.errors import UpstreamError
from parley.kit.outbound import OutboundPolicy, explain, guarded_client, read_limited
from parley.providers.catalog import ElevenLabsConfig, OpenAISTTConfig, OpenAITTSConfig
from parley.voice.audio import Resampler, write_wav
from parley.voice.engines.base import SttEngine, SttStream, Transcript, TtsEngine, VendorError, VendorTimeout

MAX_TRANSCRIPT_BYTES = 2 * 1024 * 1024


def _failure(vendor: str, exc: httpx.HTTPError | UpstreamError) -> VendorError | VendorTimeout:
    if isinstance(exc, httpx.TimeoutException):
        return VendorTimeout(f"{vendor} did not answer in time.")
    if isinstance(exc, UpstreamError):
        return VendorError(f"{vendor}: {exc.detail}")
    return VendorError(f"{vendor}: {explain(exc)}")


async def _check_status(vendor: str, response: httpx.Response) -> None:
    if response.is_success:
        return
    status = response.status_code
    if status in (401, 403):
        raise VendorError(f"{vendor} refused the credentials (HTTP {status}).")
    if status == 404:
        raise VendorError(f"{vendor} answered 404 Not Found; check the base URL, model or voice.")
    if status == 429:
        raise VendorError(f"{vendor} is rate limiting this account (HTTP 429).")
    raise VendorError(f"{vendor} answered HTTP {status}.")


class _PcmChunks:
    """Raw PCM16 bytes from the network, resampled, never split inside a sample."""

    def __init__(self, src: int, dst: int) -> None:
        self.resampler = Resampler(src, dst)
        self.carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self.carry + data
        usable = len(data) // 2 * 2
        self.carry = data[usable:]
        return self.resampler.feed(data[:usable])

    def flush(self) -> bytes:
        return self.resampler.flush()


class HttpTts(TtsEngine):
    vendor: str
    native_rate: int

    def __init__(self, policy: OutboundPolicy, timeout: float) -> None:
        self.policy = policy
        self.timeout = timeout

    @abc.abstractmethod
    def request(self, text: str, voice: str | None, language: str | None) -> tuple[str, dict[str, Any]]:
        """The vendor's endpoint and request options for one synthesis."""

    async def synthesize(
        self, text: str, *, voice: str | None = None, language: str | None = None, sample_rate: int = 16000
    ) -> AsyncIterator[bytes]:
        url, options = self.request(text, voice, language)
        pcm = _PcmChunks(self.native_rate, sample_rate)
        async with guarded_client(self.policy, timeout=self.timeout) as client:
            try:
                async with client.stream("POST", url, **options) as response:
                    await _check_status(self.vendor, response)
                    async for data in response.aiter_bytes():
                        out = pcm.feed(data)
                        if out:
                            yield out
            except (httpx.HTTPError, UpstreamError) as exc:
                raise _failure(self.vendor, exc) from exc
        tail = pcm.flush()
        if tail:
            yield tail


class OpenAITts(HttpTts):
    """``POST {base}/audio/speech`` with ``response_format: pcm`` (24 kHz PCM16, streamed)."""

    name = "openai_tts"
    vendor = "OpenAI speech"
    native_rate = 24000

    def __init__(self, config: OpenAITTSConfig, policy: OutboundPolicy, timeout: float) -> None:
        super().__init__(policy, timeout)
        self.config = config

    def request(self, text: str, voice: str | None, language: str | None) -> tuple[str, dict[str, Any]]:
        body = {
            "model": self.config.model,
            "input": text,
            "voice": voice or self.config.voice,
            "response_format": "pcm",
        }
        headers = {"Authorization": f"Bearer {self.config.api_key.get_secret_value()}"}
        return f"{self.config.base_url}/audio/speech", {"json": body, "headers": headers}


class ElevenLabsTts(HttpTts):
    """``POST {base}/v1/text-to-speech/{voice_id}/stream?output_format=pcm_16000`` with ``xi-api-key``."""

    name = "elevenlabs"
    vendor = "ElevenLabs"
    native_rate = 16000

    def __init__(self, config: ElevenLabsConfig, policy: OutboundPolicy, timeout: float) -> None:
        super().__init__(policy, timeout)
        self.config = config

    def request(self, text: str, voice: str | None, language: str | None) -> tuple[str, dict[str, Any]]:
        voice_id = httpx.URL(voice or self.config.voice_id).path.replace("/", "")
        body: dict[str, Any] = {"text": text, "model_id": self.config.model}
        if language:
            body["language_code"] = language.split("-")[0].lower()
        return f"{self.config.base_url}/v1/text-to-speech/{voice_id}/stream", {
            "json": body,
            "params": {"output_format": f"pcm_{self.native_rate}"},
            "headers": {"xi-api-key": self.config.api_key.get_secret_value()},
        }


class _BufferedStream(SttStream):
    """Collects the audio; recognises it in one request when the stream finishes (no partials)."""

    def __init__(self, engine: OpenAIStt, language: str | None, sample_rate: int, prompt: str | None) -> None:
        self.engine = engine
        self.language = language
        self.sample_rate = sample_rate
        self.prompt = prompt
        self.audio: list[bytes] = []
        self.finished = False
        self.closed = False
        self.done = asyncio.Event()  # set by finish() or aclose(); readers may start before either

    def feed(self, pcm16: bytes) -> None:
        if self.finished or self.closed:
            raise RuntimeError("the stream is finished")
        self.audio.append(pcm16)

    async def finish(self) -> None:
        self.finished = True
        self.done.set()

    async def aclose(self) -> None:
        self.closed = True
        self.audio.clear()
        self.done.set()

    async def __aiter__(self) -> AsyncIterator[Transcript]:
        await self.done.wait()
        if self.closed:
            return
        pcm = b"".join(self.audio)
        self.audio.clear()
        if not pcm:
            return
        text = await self.engine.transcribe(pcm, self.sample_rate, self.language, self.prompt)
        if text:
            yield Transcript(text, True, 0, len(pcm) * 1000 // (2 * self.sample_rate))


class OpenAIStt(SttEngine):
    """``POST {base}/audio/transcriptions`` (multipart WAV upload, JSON answer)."""

    name = "openai_stt"
    vendor = "OpenAI transcription"

    def __init__(self, config: OpenAISTTConfig, policy: OutboundPolicy, timeout: float) -> None:
        self.config = config
        self.policy = policy
        self.timeout = timeout

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        prompt = ", ".join(phrases)[:800] if phrases else None
        return _BufferedStream(self, language or self.config.language, sample_rate, prompt)

    async def transcribe(
        self, pcm16: bytes, sample_rate: int, language: str | None, prompt: str | None
    ) -> str:
        data = {"model": self.config.model, "response_format": "json"}
        if language:
            data["language"] = language.split("-")[0].lower()
        if prompt:
            data["prompt"] = prompt
        files = {"file": ("audio.wav", write_wav(pcm16, sample_rate), "audio/wav")}
        headers = {"Authorization": f"Bearer {self.config.api_key.get_secret_value()}"}
        async with guarded_client(self.policy, timeout=self.timeout) as client:
            try:
                async with client.stream(
                    "POST",
                    f"{self.config.base_url}/audio/transcriptions",
                    data=data,
                    files=files,
                    headers=headers,
                ) as response:
                    await _check_status(self.vendor, response)
                    body = await read_limited(response, MAX_TRANSCRIPT_BYTES)
            except (httpx.HTTPError, UpstreamError) as exc:
                raise _failure(self.vendor, exc) from exc
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise VendorError(f"{self.vendor} answered, but not with JSON; check the base URL.") from exc
        text = parsed.get("text") if isinstance(parsed, dict) else None
        if not isinstance(text, str):
            raise VendorError(f"{self.vendor} answered without a transcript.")
        return text.strip()
