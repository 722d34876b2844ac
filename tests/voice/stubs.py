"""Local servers speaking the speech vendors' protocols: OpenAI, ElevenLabs (HTTP) and Deepgram (WebSocket)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from websockets.asyncio.server import ServerConnection, serve

from tests.live import free_port

SPEECH_SECONDS = 0.5


def tone(rate: int, seconds: float = SPEECH_SECONDS, hz: float = 440.0) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return bytes((np.sin(2 * np.pi * hz * t) * 8000).astype("<i2").tobytes())


@dataclass
class VendorState:
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_status: int | None = None
    hang_seconds: float = 0.0
    transcript: str = "where is my car"


def make_vendor_stub(state: VendorState) -> Starlette:
    async def speech(request: Request) -> Response:
        body = await request.json()
        state.requests.append(
            {"path": request.url.path, "auth": request.headers.get("authorization"), "body": body}
        )
        if state.hang_seconds:
            await asyncio.sleep(state.hang_seconds)
        if state.fail_status:
            return JSONResponse({"error": {"message": "nope"}}, status_code=state.fail_status)
        audio = tone(24000)  # OpenAI's pcm format: 24 kHz PCM16 mono

        async def chunks() -> Any:
            for offset in range(0, len(audio), 4001):  # odd sizes split samples across chunks
                yield audio[offset : offset + 4001]

        return StreamingResponse(chunks(), media_type="audio/pcm")

    async def transcriptions(request: Request) -> Response:
        form = await request.form()
        upload = form["file"]
        assert not isinstance(upload, str)
        content = await upload.read()
        state.requests.append(
            {
                "path": request.url.path,
                "auth": request.headers.get("authorization"),
                "model": form.get("model"),
                "language": form.get("language"),
                "prompt": form.get("prompt"),
                "file_bytes": len(content),
                "riff": content[:4] == b"RIFF",
            }
        )
        if state.fail_status:
            return JSONResponse({"error": {"message": "nope"}}, status_code=state.fail_status)
        return JSONResponse({"text": state.transcript})

    async def elevenlabs(request: Request) -> Response:
        body = await request.json()
        state.requests.append(
            {
                "path": request.url.path,
                "xi": request.headers.get("xi-api-key"),
                "format": request.query_params.get("output_format"),
                "body": body,
            }
        )
        if state.fail_status:
            return JSONResponse({"detail": {"status": "invalid_api_key"}}, status_code=state.fail_status)
        rate = int(request.query_params.get("output_format", "pcm_16000").split("_")[1])
        audio = tone(rate)

        async def chunks() -> Any:
            for offset in range(0, len(audio), 3001):
                yield audio[offset : offset + 3001]

        return StreamingResponse(chunks(), media_type="audio/pcm")

    return Starlette(
        routes=[
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
            Route("/v1/text-to-speech/{voice_id}/stream", elevenlabs, methods=["POST"]),
        ]
    )


@dataclass
class DeepgramState:
    connections: list[dict[str, Any]] = field(default_factory=list)
    reject_status: int | None = None


@contextmanager
def deepgram_stub(state: DeepgramState) -> Iterator[str]:
    """A Deepgram-like /v1/listen WebSocket: one interim result per second of audio, a final at close."""
    port = free_port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Future[None] | None = None

    async def handler(connection: ServerConnection) -> None:
        info: dict[str, Any] = {
            "path": connection.request.path if connection.request else "",
            "auth": connection.request.headers.get("Authorization") if connection.request else None,
            "bytes": 0,
            "closed_stream": False,
        }
        state.connections.append(info)
        rate = 16000
        sent_interim = 0
        async for message in connection:
            if isinstance(message, bytes):
                info["bytes"] += len(message)
                seconds = info["bytes"] / 2 / rate
                if int(seconds) > sent_interim:
                    sent_interim = int(seconds)
                    await connection.send(json.dumps(_result("where is", False, 0.0, seconds)))
                continue
            if json.loads(message).get("type") == "CloseStream":
                info["closed_stream"] = True
                seconds = info["bytes"] / 2 / rate
                await connection.send(json.dumps(_result("where is my car", True, 0.0, seconds)))
                await connection.send(json.dumps({"type": "Metadata", "duration": seconds}))
                await connection.close()
                return

    async def process_request(connection: ServerConnection, request: Any) -> Any:
        if state.reject_status:
            return connection.respond(state.reject_status, "refused\n")
        return None

    async def main() -> None:
        nonlocal stop
        stop = loop.create_future()
        async with serve(handler, "127.0.0.1", port, process_request=process_request):
            ready.set()
            await stop

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10)


def _result(text: str, final: bool, start: float, duration: float) -> dict[str, Any]:
    words = [
        {"word": w, "start": start + i * 0.3, "end": start + i * 0.3 + 0.25, "confidence": 0.9}
        for i, w in enumerate(text.split())
    ]
    return {
        "type": "Results",
        "is_final": final,
        "speech_final": final,
        "start": start,
        "duration": duration,
        "channel": {"alternatives": [{"transcript": text, "confidence": 0.93, "words": words}]},
    }
