from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import File, Form, Request, UploadFile
from starlette.responses import Response

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgWriter
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import PayloadTooLarge, documented
from parley.kit.routing import ParleyRouter
from parley.voice import capabilities as _capabilities  # noqa: F401  (hands flow validation its engine checks)
from parley.voice import checks as _checks  # noqa: F401  (registers the offline engines' provider checks)
from parley.voice import registry, service
from parley.voice.schemas import SttOut, TtsIn

router = ParleyRouter(prefix="/api/inference", tags=["Inference"])

_BINARY = {"schema": {"type": "string", "format": "binary"}}
TTS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The speech: a mono 16-bit WAV file, or raw PCM16 little-endian samples "
        "(`format: pcm16`, `X-Sample-Rate` says the rate).",
        "content": {"audio/wav": _BINARY, "application/octet-stream": _BINARY},
    },
    **documented(400, 409, 502, 503, 504),
}
INFERENCE_SECONDS = 60.0


def _limit(request: Request) -> float:
    timeout: float = request.app.state.settings.outbound_timeout
    return min(INFERENCE_SECONDS, max(5.0, timeout * 3))


@router.post(
    "/tts",
    summary="Create Inference TTS",
    response_class=Response,
    response_model=None,
    responses=TTS_RESPONSES,
)
async def create_inference_tts(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[TtsIn, ParsedBody(TtsIn)],
) -> Response:
    """Speak the text with the chosen (or the organization's default) text-to-speech provider.

    400 for a voice or language the engine lacks, 409 when the provider is not configured, 502/504
    when a vendor fails or times out, 503 when the offline engine is not installed here.
    """
    settings = request.app.state.settings
    engine = await registry.tts_engine(session, settings, context, data.provider)
    started = time.perf_counter()
    pcm = await service.synthesize(
        engine,
        data.text,
        voice=data.voice,
        language=data.language,
        sample_rate=data.sample_rate,
        limit_seconds=_limit(request),
    )
    seconds = len(pcm) / 2 / data.sample_rate
    describe(request, "inference", None, provider=engine.name, characters=len(data.text))
    headers = {
        "X-Provider": engine.name,
        "X-Sample-Rate": str(data.sample_rate),
        "X-Audio-Seconds": f"{seconds:.3f}",
        "X-Synthesis-Ms": f"{(time.perf_counter() - started) * 1000:.1f}",
    }
    if data.format == "pcm16":
        return Response(pcm, media_type="application/octet-stream", headers=headers)
    return Response(service.as_wav(pcm, data.sample_rate), media_type="audio/wav", headers=headers)


@router.post(
    "/stt",
    summary="Create Inference STT",
    response_model=SttOut,
    responses=documented(400, 409, 413, 415, 502, 503, 504),
)
async def create_inference_stt(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    file: Annotated[
        UploadFile,
        File(
            description="A PCM WAV file (8 or 16 bit, any sample rate, at most 10 MB and 60 s).",
            json_schema_extra={"format": "binary"},
        ),
    ],
    language: Annotated[
        str | None,
        Form(pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})?$", description="Language, e.g. en, de."),
    ] = None,
    provider: Annotated[
        str | None,
        Form(
            min_length=1,
            max_length=40,
            description="Speech-to-text provider key (pocketsphinx, deepgram, openai_stt); default: the "
            "organization's configured one, else PocketSphinx.",
        ),
    ] = None,
    phrases: Annotated[
        list[Annotated[str, Form(max_length=200)]] | None,
        Form(
            max_length=100,
            description="Expected words or phrases (repeat the field). PocketSphinx then recognises "
            "only these words; vendors take them as hints.",
        ),
    ] = None,
) -> SttOut:
    """Transcribe a WAV file with the chosen (or the organization's default) speech-to-text provider.

    413 for files over 10 MB or 60 s, 415 for anything but PCM WAV, 400 for a language the engine
    has no model for, 409 when the provider is not configured, 502/504 for vendor failures, 503
    when the offline engine is not installed here.
    """
    data = await file.read(service.MAX_AUDIO_BYTES + 1)
    if len(data) > service.MAX_AUDIO_BYTES:
        raise PayloadTooLarge(f"The audio file may be at most {service.MAX_AUDIO_BYTES:,} bytes.")
    wav = service.parse_audio(data)
    settings = request.app.state.settings
    engine = await registry.stt_engine(session, settings, context, provider)
    result = await service.transcribe(
        engine, wav, language=language, phrases=phrases, limit_seconds=_limit(request)
    )
    describe(request, "inference", None, provider=engine.name, seconds=result.duration_seconds)
    return result
