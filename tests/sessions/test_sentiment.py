"""A conversation that ends angry is judged by the LLM classifier when the organization has a provider."""

from __future__ import annotations

from typing import Any

from parley.kit.jobs import runner_for
from tests.sessions.conftest import Platform
from tests.stubs.openai import StubState


async def test_an_angry_caller_gets_an_llm_judged_signal(
    shop: tuple[Platform, str], llm_stub: tuple[str, StubState]
) -> None:
    platform, flow_id = shop
    configured = await platform.client.put(
        "/api/providers/openai/config",
        json={"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": "stub-model"},
        headers=platform.headers,
    )
    assert configured.status_code == 200, configured.text
    session = await platform.start(flow_id)
    await platform.say(session["id"], "I am fed up, this takes forever: order 1 2")
    await platform.say(session["id"], "1 2")
    await platform.say(session["id"], "nein")  # no cost
    ended = await platform.say(session["id"], "nein")  # no callback
    assert ended["status"] == "ended", ended
    app: Any = platform.client._transport.app  # type: ignore[attr-defined]
    await runner_for(app.state).drain()

    signals = (await platform.get("/api/brain/signals", params={"type": "negative_sentiment"})).json()[
        "items"
    ]
    assert len(signals) == 1
    assert signals[0]["details"]["method"] == "llm"
    assert signals[0]["details"]["confidence"] >= 0.7
