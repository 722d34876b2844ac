"""The LLM sentiment classifier behind the ``negative_sentiment`` signal (when a provider is configured).

The keyword rule raises its signal when the call is stored; when the organization has an ``openai``
provider the brain also queues :data:`SENTIMENT_JOB` after the commit (the job is
:func:`parley.brain.tasks.classify_call`). The job sends the caller's turns to
the provider with a strict JSON-output prompt, parses the answer defensively, and when the caller is
negative with a confidence of at least :data:`MIN_CONFIDENCE` it raises the ``negative_sentiment``
signal, or upgrades the keyword rule's signal of that call instead of adding a second one.

The model is never trusted: any failure (timeout, error status, an answer that is not the JSON asked
for) is logged as a warning and leaves the keyword result exactly as it was. The job is idempotent:
a call that already has an LLM verdict is skipped. The tokens used become ``LLMUsage`` rows with
source ``sentiment``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.tenancy import scoped
from parley.llm.client import Completion
from parley.llm.service import ResolvedProvider, client_for
from parley.providers.catalog import OpenAIConfig
from parley.providers.models import ProviderConfig
from parley.providers.service import get_spec, is_configured, load_config

log = structlog.get_logger("parley.brain.sentiment")

SENTIMENT_JOB = "calls.classify_sentiment"
PROVIDER = "openai"
SIGNAL_TYPE = "negative_sentiment"
SIGNAL_SEVERITY = "medium"
USAGE_SOURCE = "sentiment"
MIN_CONFIDENCE = 0.7
# Only the end of a very long call is sent: enough to judge the mood, bounded in tokens.
MAX_CALLER_CHARS = 6000
MAX_TURN_CHARS = 1000
MAX_REASON_CHARS = 500
SENTIMENTS = frozenset({"negative", "neutral", "positive"})

SYSTEM_PROMPT = """\
You classify the sentiment of the CALLER in a phone call with a customer service agent.
Sie bewerten die Stimmung des ANRUFERS in einem Telefonat mit einem Kundenservice.
The caller may speak German or English. Der Anrufer kann Deutsch oder Englisch sprechen.

"negative" means angry, frustrated, annoyed, insulting, complaining, or threatening to cancel.
"negativ" heißt: verärgert, frustriert, genervt, beleidigend, beschwert sich oder droht zu kündigen.
Polite questions, neutral requests and thanks are not negative.

Answer with exactly one JSON object and nothing else (no prose, no code fence):
Antworten Sie ausschließlich mit genau einem JSON-Objekt:
{"sentiment": "negative" | "neutral" | "positive", "confidence": <number from 0 to 1>, \
"reason": "<one short sentence, in the language of the call>"}"""


@dataclass(frozen=True)
class Verdict:
    sentiment: str
    confidence: float
    reason: str

    @property
    def negative(self) -> bool:
        return self.sentiment == "negative" and self.confidence >= MIN_CONFIDENCE


def caller_text(transcript: list[dict[str, Any]]) -> str:
    """The caller's turns, one per line and numbered, the newest kept when the call is very long."""
    lines = [
        f"[{t.get('index')}] {str(t.get('text') or '').strip()[:MAX_TURN_CHARS]}"
        for t in transcript
        if t.get("speaker") == "caller" and str(t.get("text") or "").strip()
    ]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) > MAX_CALLER_CHARS and kept:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(reversed(kept))


def request_payload(model: str, text: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Caller turns / Äußerungen des Anrufers:\n{text}"},
        ],
        "temperature": 0,
        "max_tokens": 150,
    }


_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_verdict(content: str | None) -> Verdict | None:
    """The verdict in the model's answer, or None when it is not the JSON object asked for.

    Tolerates a code fence or words around the object; anything else (missing or unknown sentiment,
    a confidence that is not a number in 0..1) counts as no answer.
    """
    if not content:
        return None
    match = _OBJECT.search(content)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    sentiment = str(data.get("sentiment") or "").strip().casefold()
    confidence = data.get("confidence")
    if sentiment not in SENTIMENTS or isinstance(confidence, bool):
        return None
    if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        return None
    reason = data.get("reason")
    return Verdict(sentiment, float(confidence), str(reason or "")[:MAX_REASON_CHARS].replace("\x00", ""))


async def has_provider(session: AsyncSession, organization_id: str) -> bool:
    """Whether the organization has configured the provider (cached per organization, kit/orgcache.py)."""
    return await is_configured(session, organization_id, PROVIDER)


async def provider_config(
    session: AsyncSession, settings: Settings, organization_id: str
) -> OpenAIConfig | None:
    row = await session.scalar(
        scoped(ProviderConfig, organization_id).where(ProviderConfig.provider_key == PROVIDER)
    )
    if row is None:
        return None
    try:
        config = load_config(settings, get_spec(PROVIDER), row)
    except (ValidationError, ValueError):  # e.g. a secret that no longer decrypts
        log.warning("sentiment_provider_unusable", organization_id=organization_id)
        return None
    return config if isinstance(config, OpenAIConfig) else None


async def ask(settings: Settings, config: OpenAIConfig, text: str) -> Completion:
    provider = ResolvedProvider(PROVIDER, config.base_url, config.api_key.get_secret_value(), config.model)
    client, http = client_for(settings, provider)
    async with http:
        return await client.complete(request_payload(config.model, text))
