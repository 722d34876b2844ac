"""The provider checks of the offline voice engines (PocketSphinx, eSpeak NG).

They live beside the engines they open; ``parley.providers`` runs them through
:func:`parley.providers.checks.register_check`, so providers never import the voice package.
"""

from __future__ import annotations

import importlib.metadata

from parley.config import Settings
from parley.providers.catalog import EspeakConfig, PocketsphinxConfig
from parley.providers.checks import CheckResult, register_check
from parley.voice.engines.base import EngineUnavailable, LanguageUnavailable
from parley.voice.engines.espeak import EspeakTts, espeak_installed, espeak_version
from parley.voice.engines.sphinx import PocketsphinxStt, normalise_language, sphinx_installed


async def check_pocketsphinx(settings: Settings, config: PocketsphinxConfig) -> CheckResult:
    if not sphinx_installed():
        return CheckResult(
            False, "PocketSphinx is not installed on this server; install it with 'pip install pocketsphinx'."
        )
    try:
        version = importlib.metadata.version("pocketsphinx")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    language = normalise_language(config.language)
    try:
        stream = await PocketsphinxStt(language, settings.data_dir / "models").open_stream(language, 16000)
        await stream.aclose()
    except (EngineUnavailable, LanguageUnavailable) as exc:
        return CheckResult(False, exc.detail)
    return CheckResult(True, f"PocketSphinx {version} is installed (offline, language {language}).")


async def check_espeak(settings: Settings, config: EspeakConfig) -> CheckResult:
    if not espeak_installed():
        return CheckResult(
            False, "eSpeak NG is not installed on this server; install it with 'pip install espeakng-loader'."
        )
    engine = EspeakTts(config.voice, config.speed)
    try:
        audio = [chunk async for chunk in engine.synthesize("ok", sample_rate=16000)]
    except (EngineUnavailable, LanguageUnavailable) as exc:
        return CheckResult(False, exc.detail)
    if not audio:
        return CheckResult(False, "eSpeak NG is installed but produced no audio.")
    return CheckResult(
        True, f"eSpeak NG (espeakng-loader {espeak_version()}) is installed (offline, voice {config.voice})."
    )


register_check("pocketsphinx", check_pocketsphinx)
register_check("espeak", check_espeak)
