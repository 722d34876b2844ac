"""Engine selection from the organization's provider configurations and a flow's voice settings."""

from __future__ import annotations

import httpx
import pytest

from parley.app import create_app
from parley.auth.principal import OrgContext, Principal
from parley.auth.roles import Role
from parley.config import Settings
from parley.flows.definition import VoiceSettings
from parley.kit.db import Database
from parley.kit.errors import BadRequest, Conflict
from parley.voice import registry
from parley.voice.engines.deepgram import DeepgramStt
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt
from parley.voice.engines.vendors import ElevenLabsTts
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org


async def test_offline_defaults_then_configured_vendors_then_the_flow_choice(
    settings: Settings, database: Database
) -> None:
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        org = await create_org(client)
        headers = auth(ALICE, str(org["id"]))
        context = OrgContext(str(org["id"]), Role.owner, Principal("user", "usr_test"))

        async with database.sessionmaker() as session:
            engines = await registry.engines_for_flow(session, settings, context, None)
        assert isinstance(engines.stt, PocketsphinxStt) and isinstance(engines.tts, EspeakTts)
        assert engines.tts.voice == "de" and engines.tts_voice is None

        for key, config in (
            ("espeak", {"voice": "en-us", "speed": 140}),
            ("deepgram", {"api_key": "dg-key", "base_url": "https://dg.example.com/v1"}),
        ):
            put = await client.put(f"/api/providers/{key}/config", json=config, headers=headers)
            assert put.status_code == 200, put.text

        async with database.sessionmaker() as session:
            chosen = await registry.engines_for_flow(session, settings, context, None)
            assert isinstance(chosen.stt, DeepgramStt)  # a configured vendor beats the offline default
            assert isinstance(chosen.tts, EspeakTts) and chosen.tts.speed == 140

            voice = VoiceSettings.model_validate(
                {"stt": {"provider": "pocketsphinx"}, "tts": {"provider": "espeak", "voice": "de"}}
            )
            flow = await registry.engines_for_flow(session, settings, context, voice)
            assert isinstance(flow.stt, PocketsphinxStt) and flow.tts_voice == "de"

            with pytest.raises(Conflict, match="PUT /api/providers/elevenlabs/config"):
                await registry.tts_engine(session, settings, context, "elevenlabs")
            with pytest.raises(BadRequest, match="not a speech-to-text provider"):
                await registry.stt_engine(session, settings, context, "espeak")

        put = await client.put(
            "/api/providers/elevenlabs/config", json={"api_key": "xi", "voice_id": "v1"}, headers=headers
        )
        assert put.status_code == 200
        async with database.sessionmaker() as session:
            assert isinstance(await registry.tts_engine(session, settings, context, None), ElevenLabsTts)
