"""The organization's active webhook subscriptions and the analysis block of a published flow version are
kept per organization in the process (kit/orgcache.py): the turn that ends a conversation reads neither
once they are known, and a change (a new, paused or deleted subscription, a deleted flow) is seen by the
next conversation at once. One organization's entries never answer another's."""

from __future__ import annotations

from typing import Any

from parley.kit.db import Database
from tests.notifications.conftest import Receiver
from tests.privacy.test_settings_cache import statements
from tests.webhooks.conftest import CALLBACK_FLOW, Platform, PlatformFactory, unique
from tests.webhooks.test_events import events

SUBSCRIPTIONS_READ = "FROM webhook_subscriptions"
VERSION_READ = "FROM flow_versions"


def _publishing_reads(seen: list[str]) -> list[str]:
    """The reads of the organization's active subscriptions (not the delivery job's by id)."""
    return [s for s in seen if SUBSCRIPTIONS_READ in s and "active" in s.partition("WHERE")[2]]


def _types(receiver: Receiver, path: str) -> list[str]:
    return sorted(e["type"] for e in events(receiver, path))


async def test_a_subscription_change_is_seen_by_the_next_event_at_once(
    make_platform: PlatformFactory, receiver: Receiver, database: Database
) -> None:
    platform: Platform = await make_platform()
    flow_id = await platform.flow(CALLBACK_FLOW)
    await platform.converse(flow_id, "Ja bitte", "morgen")  # no subscription yet: known as none

    path = unique("cache")
    subscription = await platform.subscribe(f"{receiver.url}{path}", "call.started", "call.ended")
    await platform.converse(flow_id, "Ja bitte", "morgen")
    assert _types(receiver, path) == ["call.ended", "call.started"]

    with statements(database) as seen:  # known now: neither the opening nor the end reads them
        await platform.converse(flow_id, "Ja bitte", "morgen")
    assert not _publishing_reads(seen), seen
    assert _types(receiver, path) == ["call.ended", "call.ended", "call.started", "call.started"]

    # another organization's subscription is its own, and this one's does not answer for it
    other: Platform = await make_platform()
    other_path = unique("other")
    await other.subscribe(f"{receiver.url}{other_path}", "call.ended")
    await other.converse(await other.flow(CALLBACK_FLOW), "Ja bitte", "morgen")
    assert _types(receiver, other_path) == ["call.ended"]
    assert len(_types(receiver, path)) == 4

    paused = await platform.client.patch(
        f"/api/webhooks/subscriptions/{subscription['id']}", json={"active": False}, headers=platform.headers
    )
    assert paused.status_code == 200, paused.text
    await platform.converse(flow_id, "Ja bitte", "morgen")
    assert len(_types(receiver, path)) == 4

    resumed = await platform.client.patch(
        f"/api/webhooks/subscriptions/{subscription['id']}", json={"active": True}, headers=platform.headers
    )
    assert resumed.status_code == 200, resumed.text
    await platform.converse(flow_id, "Ja bitte", "morgen")
    assert len(_types(receiver, path)) == 6

    deleted = await platform.client.delete(
        f"/api/webhooks/subscriptions/{subscription['id']}", headers=platform.headers
    )
    assert deleted.status_code == 200, deleted.text
    await platform.converse(flow_id, "Ja bitte", "morgen")
    assert len(_types(receiver, path)) == 6
    assert _types(receiver, other_path) == ["call.ended"]


async def _analysis_status(platform: Platform, session_id: str) -> Any:
    return (await platform.call_of(session_id))["analysis_status"]


async def test_the_analysis_block_is_read_once_per_version_and_goes_with_the_flow(
    make_platform: PlatformFactory, database: Database
) -> None:
    platform: Platform = await make_platform()
    flow_id = await platform.flow(CALLBACK_FLOW)
    first = await platform.converse(flow_id, "Ja bitte", "morgen")
    assert await _analysis_status(platform, first) == "done"

    started = await platform.post("/api/sessions", {"flow_id": flow_id, "channel": "phone"})
    session_id = str(started.json()["id"])
    await platform.post(f"/api/sessions/{session_id}/messages", {"text": "Ja bitte"})
    with statements(database) as seen:  # the ending turn: the version's block is known
        ended = await platform.post(f"/api/sessions/{session_id}/messages", {"text": "morgen"})
    assert ended.json()["outcome"] == "completed"
    assert not [s for s in seen if VERSION_READ in s], seen
    await platform.drain()
    assert await _analysis_status(platform, session_id) == "done"

    # the same flow id and version in another organization is not this one's
    other: Platform = await make_platform()
    other_flow = await other.flow({k: v for k, v in CALLBACK_FLOW.items() if k != "analysis"})
    assert await _analysis_status(other, await other.converse(other_flow, "Ja bitte", "morgen")) is None

    # a conversation still running when its flow is deleted ends without an analysis
    started = await platform.post("/api/sessions", {"flow_id": flow_id, "channel": "phone"})
    orphan = str(started.json()["id"])
    removed = await platform.client.delete(f"/api/flows/{flow_id}", headers=platform.headers)
    assert removed.status_code == 200, removed.text
    for line in ("Ja bitte", "morgen"):  # the version runs on (the process keeps its definition)
        turn = await platform.post(f"/api/sessions/{orphan}/messages", {"text": line})
        assert turn.status_code == 200, turn.text
    assert turn.json()["outcome"] == "completed"
    await platform.drain()
    assert await _analysis_status(platform, orphan) is None
