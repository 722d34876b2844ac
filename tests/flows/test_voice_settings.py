"""A flow's voice settings are checked against what the named engines can serve."""

from __future__ import annotations

from typing import Any

import pytest

from parley.demo.flows import order_status_flow
from parley.flows.definition import FlowDefinition
from parley.flows.validation import OrgResources, validate_definition


def _issues(language: str, languages: list[str], voice: dict[str, Any]) -> list[tuple[str, str]]:
    definition = FlowDefinition.model_validate(
        {
            "language": language,
            "languages": languages,
            "voice": voice,
            "start_node": "bye",
            "nodes": [{"id": "bye", "type": "end", "text": "Tschüss"}],
        }
    )
    return [(i.field, i.message) for i in validate_definition(definition, OrgResources(tools={}))]


@pytest.mark.parametrize("language", ["de", "en"])
def test_the_demo_flows_voice_settings_are_valid(language: str) -> None:
    definition = FlowDefinition.model_validate(order_status_flow(language))
    assert not [
        i for i in validate_definition(definition, OrgResources(tools={})) if i.field.startswith("voice")
    ]


def test_pocketsphinx_serves_german_and_english() -> None:
    voice = {
        "stt": {"provider": "pocketsphinx", "model": "de-DE"},
        "tts": {"provider": "espeak", "voice": "de"},
    }
    assert _issues("de", ["en"], voice) == []


def test_a_language_pocketsphinx_cannot_hear_is_refused_with_what_it_serves() -> None:
    problems = _issues("fr", [], {"stt": {"provider": "pocketsphinx", "model": "fr-FR"}})
    fields = [f for f, _ in problems]
    assert fields == ["voice.stt.model", "voice.stt.provider"]
    assert "pocketsphinx cannot serve the model 'fr-FR'" in problems[0][1]
    assert "de, de-DE" in problems[0][1] and "en-US" in problems[0][1]
    assert "cannot hear the flow's language 'fr'" in problems[1][1]


def test_espeak_models_unknown_voices_and_unknown_providers_are_refused() -> None:
    problems = dict(
        _issues(
            "de",
            [],
            {"stt": {"provider": "espeak"}, "tts": {"provider": "espeak", "model": "x", "voice": "klingon"}},
        )
    )
    assert "not a speech-to-text provider" in problems["voice.stt.provider"]
    assert "espeak has no models" in problems["voice.tts.model"]
    assert "espeak has no voice 'klingon'" in problems["voice.tts.voice"]
    assert _issues("de", [], {"tts": {"provider": "espeak", "voice": "de+f2"}}) == []


def test_vendor_models_are_passed_through() -> None:
    voice = {
        "stt": {"provider": "deepgram", "model": "nova-3"},
        "tts": {"provider": "openai_tts", "model": "tts-1-hd"},
    }
    assert _issues("fr", [], voice) == []
