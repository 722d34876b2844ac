"""Whether an organization has a model provider is kept per organization in the process
(kit/orgcache.py): a turn that hits the cache does not read ``provider_configs``; removing or adding
the configuration is seen by the next session at once."""

from __future__ import annotations

from typing import Any

from parley.kit.db import Database
from tests.privacy.test_settings_cache import statements
from tests.sessions.conftest import Platform, StubState
from tests.sessions.test_router import _llm_flow, _llm_platform

CONFIG_READ = "FROM provider_configs"


async def test_a_provider_change_is_seen_by_the_next_session_at_once(
    make_platform: Any, connector: dict[str, str], llm_stub: tuple[str, StubState], database: Database
) -> None:
    platform: Platform = await make_platform(connector_url=connector["url"])
    await platform.tool(
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}}
    )
    flow_id = await platform.flow(_llm_flow())
    without = await platform.start(flow_id)  # no provider: cached as such
    assert (await platform.say(without["id"], "hi"))["reply"] != "You said: hi"

    configured = await platform.client.put(
        "/api/providers/openai/config",
        json={"api_key": "sk-test-stub-key", "base_url": f"{llm_stub[0]}/v1", "model": "stub-model"},
        headers=platform.headers,
    )
    assert configured.status_code == 200, configured.text
    first = await platform.start(flow_id)  # the committed change is seen at once
    assert (await platform.say(first["id"], "hi"))["reply"] == "You said: hi"
    with statements(database) as seen:
        second = await platform.start(flow_id)
    assert not [s for s in seen if CONFIG_READ in s and "provider_key" in s.split("FROM")[0]], seen
    assert (await platform.say(second["id"], "again"))["reply"] == "You said: again"

    removed = await platform.client.delete("/api/providers/openai/config", headers=platform.headers)
    assert removed.status_code == 200, removed.text
    gone = await platform.start(flow_id)
    assert (await platform.say(gone["id"], "hi"))["reply"] != "You said: hi"

    other: Platform = await _llm_platform(make_platform, connector, llm_stub, "stub-model")
    other_session = await other.start(await other.flow(_llm_flow()))
    assert (await other.say(other_session["id"], "hi"))["reply"] == "You said: hi"  # its own entry
