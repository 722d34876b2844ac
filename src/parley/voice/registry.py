"""Choosing the speech engines for an organization (and a flow's voice settings).

An explicit provider wins; otherwise the first vendor provider of that kind the organization has
configured; otherwise the offline default (PocketSphinx, eSpeak NG), which needs no configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.config import Settings
from parley.flows.definition import SpeechSettings, VoiceSettings
from parley.kit.errors import BadRequest, Conflict
from parley.kit.outbound import outbound_policy
from parley.providers import service as providers
from parley.providers.catalog import (
    PROVIDERS,
    DeepgramConfig,
    ElevenLabsConfig,
    EspeakConfig,
    OpenAISTTConfig,
    OpenAITTSConfig,
    PocketsphinxConfig,
    ProviderKind,
    ProviderSettings,
    ProviderSpec,
)
from parley.voice.engines.base import SttEngine, TtsEngine
from parley.voice.engines.deepgram import DeepgramStt
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt
from parley.voice.engines.vendors import ElevenLabsTts, OpenAIStt, OpenAITts


class ProviderNotConfigured(Conflict):
    code = "provider_not_configured"


KIND_NAMES = {"stt": "speech-to-text", "tts": "text-to-speech"}
VENDOR_TIMEOUT_CAP = 60.0


@dataclass(frozen=True)
class SpeechEngines:
    stt: SttEngine
    tts: TtsEngine
    tts_voice: str | None = None


def _spec(key: str, kind: ProviderKind) -> ProviderSpec:
    spec = PROVIDERS.get(key)
    if spec is None or spec.kind != kind:
        choices = ", ".join(k for k, s in PROVIDERS.items() if s.kind == kind)
        raise BadRequest(f"{key!r} is not a {KIND_NAMES[kind]} provider; choose one of {choices}.")
    return spec


async def _config(
    session: AsyncSession, settings: Settings, context: OrgContext, key: str | None, kind: ProviderKind
) -> tuple[ProviderSpec, ProviderSettings]:
    if key is None:
        default: ProviderSpec | None = None
        for spec in PROVIDERS.values():
            if spec.kind != kind:
                continue
            if spec.default:
                default = default or spec
            elif await providers.find_config(session, context, spec.key) is not None:
                key = spec.key
                break
        if key is None:
            assert default is not None
            key = default.key
    spec = _spec(key, kind)
    row = await providers.find_config(session, context, spec.key)
    if row is None and not spec.offline:
        raise ProviderNotConfigured(
            f"Provider {spec.key!r} is not configured in this organization; "
            f"set it up with PUT /api/providers/{spec.key}/config."
        )
    try:
        return spec, providers.load_config(settings, spec, row)
    except ValidationError as exc:
        raise Conflict(
            f"The stored configuration of {spec.key!r} is incomplete (a secret no longer decrypts); save it again."
        ) from exc


def _timeout(settings: Settings) -> float:
    return min(settings.outbound_timeout, VENDOR_TIMEOUT_CAP)


def build_stt(settings: Settings, config: ProviderSettings) -> SttEngine:
    if isinstance(config, PocketsphinxConfig):
        return PocketsphinxStt(config.language, settings.data_dir / "models")
    if isinstance(config, OpenAISTTConfig):
        return OpenAIStt(config, outbound_policy(settings), _timeout(settings))
    if isinstance(config, DeepgramConfig):
        return DeepgramStt(config, outbound_policy(settings), _timeout(settings))
    raise BadRequest("That provider does not do speech-to-text.")  # pragma: no cover - _spec checks


def build_tts(settings: Settings, config: ProviderSettings) -> TtsEngine:
    if isinstance(config, EspeakConfig):
        return EspeakTts(config.voice, config.speed)
    if isinstance(config, OpenAITTSConfig):
        return OpenAITts(config, outbound_policy(settings), _timeout(settings))
    if isinstance(config, ElevenLabsConfig):
        return ElevenLabsTts(config, outbound_policy(settings), _timeout(settings))
    raise BadRequest("That provider does not do text-to-speech.")  # pragma: no cover - _spec checks


async def stt_engine(
    session: AsyncSession, settings: Settings, context: OrgContext, provider: str | None
) -> SttEngine:
    _, config = await _config(session, settings, context, provider, "stt")
    return build_stt(settings, config)


async def tts_engine(
    session: AsyncSession, settings: Settings, context: OrgContext, provider: str | None
) -> TtsEngine:
    _, config = await _config(session, settings, context, provider, "tts")
    return build_tts(settings, config)


def _with_flow_settings(config: ProviderSettings, speech: SpeechSettings | None) -> ProviderSettings:
    """The organization's provider settings with the flow's ``model`` (and STT language) on top."""
    if speech is None or speech.model is None:
        return config
    if isinstance(config, PocketsphinxConfig):  # its "model" is the language it listens in
        return config.model_copy(update={"language": speech.model})
    if isinstance(config, OpenAISTTConfig | DeepgramConfig | OpenAITTSConfig | ElevenLabsConfig):
        return config.model_copy(update={"model": speech.model})
    return config  # eSpeak has no models (validation refuses one)


async def engines_for_flow(
    session: AsyncSession, settings: Settings, context: OrgContext, voice: VoiceSettings | None
) -> SpeechEngines:
    """The engines a flow's voice settings ask for, with the organization's credentials."""
    stt_settings = voice.stt if voice else None
    tts_settings = voice.tts if voice else None
    _, stt_config = await _config(
        session, settings, context, stt_settings.provider if stt_settings else None, "stt"
    )
    _, tts_config = await _config(
        session, settings, context, tts_settings.provider if tts_settings else None, "tts"
    )
    stt = build_stt(settings, _with_flow_settings(stt_config, stt_settings))
    tts = build_tts(settings, _with_flow_settings(tts_config, tts_settings))
    tts_voice = tts_settings.voice if tts_settings else None
    return SpeechEngines(stt, tts, tts_voice)
