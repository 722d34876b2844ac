"""The providers Parley supports, each with a Pydantic model of its configuration.

A field typed ``SecretStr`` is a secret: encrypted at rest, masked in responses, and kept when a PUT
omits it. The JSON schema served by ``GET /api/providers`` is generated from these models.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr

ProviderKind = Literal["llm", "stt", "tts", "telephony", "email"]


def _url(schemes: tuple[str, ...]) -> Any:
    def check(value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme.lower() not in schemes or not parts.hostname:
            raise ValueError(
                f"must be an absolute URL starting with {' or '.join(s + '://' for s in schemes)}"
            )
        if parts.username or parts.password:
            raise ValueError("must not carry credentials; use the credential fields")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query string or fragment")
        return value.strip().rstrip("/")

    return AfterValidator(check)


HttpUrlStr = Annotated[str, Field(min_length=8, max_length=500), _url(("http", "https"))]
LiveKitUrlStr = Annotated[str, Field(min_length=6, max_length=500), _url(("http", "https", "ws", "wss"))]
Secret = Annotated[SecretStr, Field(min_length=1, max_length=2000)]


class ProviderSettings(BaseModel):
    # Multipart forms send numbers as text; secrets made of digits must stay strings.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, coerce_numbers_to_str=True)


class OpenAIConfig(ProviderSettings):
    api_key: Secret = Field(description="API key, sent as a bearer token.")
    base_url: HttpUrlStr = Field(
        default="https://api.openai.com/v1", description="Any OpenAI-compatible endpoint, up to /v1."
    )
    model: str = Field(default="gpt-4o-mini", min_length=1, max_length=120)


class PocketsphinxConfig(ProviderSettings):
    language: str = Field(default="en-us", min_length=2, max_length=20, description="Acoustic model.")


class DeepgramConfig(ProviderSettings):
    api_key: Secret
    base_url: HttpUrlStr = "https://api.deepgram.com/v1"
    model: str = Field(default="nova-2", min_length=1, max_length=80)
    language: str = Field(default="de", min_length=2, max_length=20)


class OpenAISTTConfig(ProviderSettings):
    api_key: Secret
    base_url: HttpUrlStr = "https://api.openai.com/v1"
    model: str = Field(default="whisper-1", min_length=1, max_length=120)
    language: str | None = Field(default=None, min_length=2, max_length=20)


class EspeakConfig(ProviderSettings):
    voice: str = Field(default="de", min_length=1, max_length=40)
    speed: int = Field(default=160, ge=80, le=450, description="Words per minute.")


class ElevenLabsConfig(ProviderSettings):
    api_key: Secret
    base_url: HttpUrlStr = "https://api.elevenlabs.io"
    voice_id: str = Field(default="21m00Tcm4TlvDq8ikWAM", min_length=1, max_length=80)
    model: str = Field(default="eleven_multilingual_v2", min_length=1, max_length=80)


class OpenAITTSConfig(ProviderSettings):
    api_key: Secret
    base_url: HttpUrlStr = "https://api.openai.com/v1"
    model: str = Field(default="tts-1", min_length=1, max_length=120)
    voice: str = Field(default="alloy", min_length=1, max_length=40)


class TwilioConfig(ProviderSettings):
    account_sid: str = Field(pattern=r"^AC[0-9a-fA-F]{32}$", description="Account SID (AC...).")
    auth_token: Secret
    api_base: HttpUrlStr = "https://api.twilio.com"


class LiveKitConfig(ProviderSettings):
    url: LiveKitUrlStr = Field(description="Server URL (wss://... or https://...).")
    api_key: str = Field(min_length=1, max_length=200)
    api_secret: Secret


class SMTPConfig(ProviderSettings):
    host: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.-]+$|^\[?[0-9A-Fa-f:.]+\]?$")
    port: int = Field(default=587, ge=1, le=65535)
    username: str | None = Field(default=None, min_length=1, max_length=320)
    password: Secret | None = None
    starttls: bool = Field(default=True, description="Upgrade the connection with STARTTLS.")
    from_address: str = Field(
        min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$", examples=["calls@example.com"]
    )


@dataclass(frozen=True)
class ProviderSpec:
    key: str
    kind: ProviderKind
    name: str
    description: str
    config_model: type[ProviderSettings]
    offline: bool = False
    default: bool = False

    @property
    def secret_fields(self) -> list[str]:
        return [
            name for name, field in self.config_model.model_fields.items() if _is_secret(field.annotation)
        ]

    def config_schema(self) -> dict[str, Any]:
        schema = self.config_model.model_json_schema()
        for name in self.secret_fields:
            schema["properties"][name]["x-secret"] = True
        return schema


def _is_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    if get_origin(annotation) in (Union, types.UnionType, Annotated):
        return any(_is_secret(arg) for arg in get_args(annotation))
    return False


PROVIDERS: dict[str, ProviderSpec] = {
    spec.key: spec
    for spec in (
        ProviderSpec(
            "openai", "llm", "OpenAI-compatible LLM", "Any endpoint speaking the OpenAI API.", OpenAIConfig
        ),
        ProviderSpec(
            "pocketsphinx",
            "stt",
            "PocketSphinx",
            "Offline speech recognition on this server.",
            PocketsphinxConfig,
            offline=True,
            default=True,
        ),
        ProviderSpec("deepgram", "stt", "Deepgram", "Streaming speech recognition.", DeepgramConfig),
        ProviderSpec(
            "openai_stt", "stt", "OpenAI speech-to-text", "Whisper through the OpenAI API.", OpenAISTTConfig
        ),
        ProviderSpec(
            "espeak",
            "tts",
            "eSpeak NG",
            "Offline speech synthesis on this server.",
            EspeakConfig,
            offline=True,
            default=True,
        ),
        ProviderSpec("elevenlabs", "tts", "ElevenLabs", "Neural speech synthesis.", ElevenLabsConfig),
        ProviderSpec(
            "openai_tts", "tts", "OpenAI text-to-speech", "Speech through the OpenAI API.", OpenAITTSConfig
        ),
        ProviderSpec(
            "twilio", "telephony", "Twilio", "Phone numbers and calls through Twilio.", TwilioConfig
        ),
        ProviderSpec(
            "livekit", "telephony", "LiveKit", "Real-time media and SIP through LiveKit.", LiveKitConfig
        ),
        ProviderSpec("smtp", "email", "SMTP", "Outgoing e-mail through an SMTP server.", SMTPConfig),
    )
}
