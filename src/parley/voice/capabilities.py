"""What each speech engine can serve, for checking a flow's voice settings at validation and publish.

A flow names engines in ``voice.stt`` / ``voice.tts`` and the languages it speaks in ``language`` and
``languages``. Asking an engine for a language, model or voice it cannot serve is refused with a
sentence naming the engine, what was asked and what it serves, instead of failing on the first call.
Vendor models and voices are the vendor's to judge (they are passed through), so only the offline
engines are checked in detail.
"""

from __future__ import annotations

import functools
from pathlib import Path

from parley.flows import validation
from parley.flows.definition import SpeechSettings
from parley.providers.catalog import PROVIDERS
from parley.voice.engines import lexicon

# PocketSphinx without a model on disk: the bundled US English model hears English freely and German
# through the German lexicon's grammar.
POCKETSPHINX_SERVES = "en, en-US (free speech, numbers, yes/no) and de, de-DE (numbers, ja/nein)"


def _norm(tag: str) -> str:
    return tag.strip().lower().replace("_", "-")


def pocketsphinx_serves(language: str, models_dir: Path | None = None) -> bool:
    tag = _norm(language)
    if lexicon.base_language(tag) in lexicon.LEXICONS:
        return True
    return models_dir is not None and (models_dir / "pocketsphinx" / tag / "hmm").is_dir()


@functools.cache
def espeak_voices() -> frozenset[str]:
    """The voice names eSpeak NG's installed data knows ("de", "en-us", ...), lower case."""
    try:
        import espeakng_loader  # type: ignore[import-untyped]
    except ImportError:
        return frozenset()
    root = Path(espeakng_loader.get_data_path()) / "lang"
    return frozenset(p.name.lower() for p in root.rglob("*") if p.is_file())


def _kind_keys(kind: str) -> list[str]:
    return [key for key, spec in PROVIDERS.items() if spec.kind == kind]


def stt_problems(
    stt: SpeechSettings, languages: list[str], models_dir: Path | None = None
) -> list[tuple[str, str]]:
    """(field, sentence) for each thing the flow asks of its speech-to-text engine that it cannot do."""
    keys = _kind_keys("stt")
    if stt.provider not in keys:
        return [
            (
                "provider",
                f"{stt.provider!r} is not a speech-to-text provider; choose one of {', '.join(keys)}",
            )
        ]
    if stt.provider != "pocketsphinx":
        return []
    problems: list[tuple[str, str]] = []
    if stt.voice is not None:
        problems.append(("voice", "pocketsphinx recognizes speech and has no voices; remove 'voice'"))
    if stt.model is not None and not pocketsphinx_serves(stt.model, models_dir):
        problems.append(
            (
                "model",
                f"pocketsphinx cannot serve the model {stt.model!r}: it serves {POCKETSPHINX_SERVES}, "
                "and languages with a model under <data dir>/models/pocketsphinx/",
            )
        )
    for language in languages:
        if not pocketsphinx_serves(language, models_dir):
            problems.append(
                (
                    "provider",
                    f"pocketsphinx cannot hear the flow's language {language!r}: it serves "
                    f"{POCKETSPHINX_SERVES}; choose a vendor speech-to-text provider for {language!r}",
                )
            )
    return problems


def tts_problems(tts: SpeechSettings) -> list[tuple[str, str]]:
    keys = _kind_keys("tts")
    if tts.provider not in keys:
        return [
            (
                "provider",
                f"{tts.provider!r} is not a text-to-speech provider; choose one of {', '.join(keys)}",
            )
        ]
    if tts.provider != "espeak":
        return []
    problems: list[tuple[str, str]] = []
    if tts.model is not None:
        problems.append(("model", "espeak has no models, only voices; remove 'model' and set 'voice'"))
    voices = espeak_voices()
    if tts.voice is not None and voices and tts.voice.split("+")[0].lower() not in voices:
        problems.append(
            (
                "voice",
                f"espeak has no voice {tts.voice!r}; it has e.g. de, en-us, en, fr, es, it "
                f"({len(voices)} voices; a variant may follow '+', as in 'de+f2')",
            )
        )
    return problems


def _tts_check(tts: SpeechSettings, _languages: list[str]) -> list[tuple[str, str]]:
    return tts_problems(tts)


# Flow validation asks these (parley.flows.validation cannot import the voice package).
validation.STT_CHECKS.append(stt_problems)
validation.TTS_CHECKS.append(_tts_check)
