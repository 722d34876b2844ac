"""Every event type reaches a local receiver signed, with the documented payload; retries with the
real job runner and the delivery log; the test-send; masking; tenant isolation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.db import unit_of_work
from parley.kit.signing import SIGNATURE_HEADER, verify
from parley.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEvent, WebhookSubscription
from parley.webhooks.service import retry_delay
from tests.notifications.conftest import Receiver
from tests.webhooks.conftest import CALLBACK_FLOW, SECRET, Platform, PlatformFactory, unique

ALL = ["call.started", "call.ended", "call.analyzed", "signal.raised", "campaign.contact.completed"]


def events(receiver: Receiver, path: str) -> list[dict[str, Any]]:
    """The events the receiver got at ``path``, each checked for a valid signature and matching headers."""
    out = []
    for received in receiver.at(path):
        headers = {k.lower(): v for k, v in received.headers.items()}
        assert verify(SECRET, headers[SIGNATURE_HEADER.lower()], received.body), "bad signature"
        assert not verify("another-secret-of-16+", headers[SIGNATURE_HEADER.lower()], received.body)
        body = json.loads(received.body)
        assert headers["x-parley-event"] == body["type"]
        assert headers["x-parley-delivery"].startswith("whd_")
        out.append(body)
    return out


async def deliveries(platform: Platform, **params: Any) -> list[dict[str, Any]]:
    response = await platform.get("/api/webhooks/deliveries", **params)
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


async def test_every_event_type_reaches_the_subscriber_signed(platform: Platform, receiver: Receiver) -> None:
    path = unique("all")
    subscription = await platform.subscribe(f"{receiver.url}{path}", *ALL)
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await platform.converse(flow_id, "Ja bitte", "morgen um 10 Uhr")
    await platform.publish(
        "campaign.contact.completed", {"campaign_id": "cmp_1", "contact_id": "cct_1", "status": "completed"}
    )

    got = events(receiver, path)
    by_type = {e["type"]: e for e in got}
    assert sorted(by_type) == sorted(ALL) and len(got) == len(ALL)
    for event in got:
        assert event["id"].startswith("evt_") and event["organization_id"] == platform.org
        assert "test" not in event

    started = by_type["call.started"]["data"]
    assert started["session_id"] == session_id and started["flow_id"] == flow_id
    assert started["channel"] == "phone"

    ended = by_type["call.ended"]["data"]
    assert ended["session_id"] == session_id and ended["outcome"] == "completed"
    assert ended["call_id"].startswith("call_")
    assert [t["text"] for t in ended["transcript"] if t["speaker"] == "caller"] == [
        "Ja bitte",
        "morgen um 10 Uhr",
    ]
    assert ended["variables"]["callback_requested"] is True
    assert ended["variables"]["preferred_time"] == "morgen um 10 Uhr"
    assert ended["tool_calls"] == []
    assert ended["metrics"]["turn_count"] == len(ended["transcript"])
    assert set(ended["metrics"]["usage"]) == {
        "llm_prompt_tokens",
        "llm_completion_tokens",
        "tts_characters",
        "stt_seconds",
    }
    assert "recording_url" in ended and ended["signal_types"] == ["callback_requested"]

    signal = by_type["signal.raised"]["data"]
    assert signal["type"] == "callback_requested" and signal["severity"] == "medium"
    assert signal["call_id"] == ended["call_id"] and signal["signal_id"].startswith("sig_")

    analyzed = by_type["call.analyzed"]["data"]
    assert analyzed["call_id"] == ended["call_id"] and analyzed["analysis_status"] == "done"
    assert analyzed["analysis_method"] == "variables"
    assert analyzed["extracted"] == {
        "callback_requested": True,
        "preferred_time": "morgen um 10 Uhr",
        "topic": None,
    }
    assert "outcome completed" in analyzed["summary"]

    assert by_type["campaign.contact.completed"]["data"]["contact_id"] == "cct_1"

    log = await deliveries(platform, subscription_id=subscription["id"])
    assert len(log) == len(ALL) and {d["status"] for d in log} == {"delivered"}
    assert all(d["attempt_log"][0]["status_code"] == 200 for d in log)
    detail = await platform.get(f"/api/webhooks/deliveries/{log[0]['id']}")
    assert detail.status_code == 200 and detail.json()["payload"]["type"] == log[0]["event_type"]


async def test_only_wanted_types_of_active_subscriptions_are_sent(
    platform: Platform, receiver: Receiver
) -> None:
    wanted, paused = unique("wanted"), unique("paused")
    await platform.subscribe(f"{receiver.url}{wanted}", "signal.raised")
    other = await platform.subscribe(f"{receiver.url}{paused}", *ALL)
    patched = await platform.client.patch(
        f"/api/webhooks/subscriptions/{other['id']}", json={"active": False}, headers=platform.headers
    )
    assert patched.status_code == 200 and patched.json()["active"] is False
    await platform.converse(await platform.flow(CALLBACK_FLOW), "nein", "nie")
    assert [e["type"] for e in events(receiver, wanted)] == ["signal.raised"]
    assert receiver.at(paused) == []


async def test_a_failing_receiver_is_retried_and_every_attempt_logged(
    platform: Platform, receiver: Receiver
) -> None:
    path = unique("flaky")
    receiver.fail_first[path] = 2
    subscription = await platform.subscribe(f"{receiver.url}{path}", "campaign.contact.completed")
    [delivery_id] = await platform.publish("campaign.contact.completed", {"contact_id": "cct_2"})

    response = await platform.get(f"/api/webhooks/deliveries/{delivery_id}")
    delivery = response.json()
    assert delivery["status"] == "delivered" and delivery["attempts"] == 3
    log = delivery["attempt_log"]
    assert [a["status_code"] for a in log] == [500, 500, 200]
    assert [a["outcome"] for a in log] == ["transient", "transient", "delivered"]
    assert log[0]["error"] == "The receiver answered HTTP 500."
    assert log[0]["response_snippet"] == "temporarily broken"
    assert all(a["latency_ms"] >= 0 for a in log)
    # The same event id and bytes on every attempt: receivers can drop duplicates.
    bodies = {r.body for r in receiver.at(path)}
    assert len(bodies) == 1 and len(receiver.at(path)) == 3
    assert subscription["id"] == delivery["subscription_id"]


async def test_a_receiver_down_for_good_ends_failed_after_the_bounded_attempts(
    make_platform: PlatformFactory, receiver: Receiver
) -> None:
    platform = await make_platform(webhook_max_attempts=3)
    await platform.subscribe(f"{receiver.url}/hook/status/503", "campaign.contact.completed")
    [delivery_id] = await platform.publish("campaign.contact.completed", {"contact_id": "cct_3"})
    delivery = (await platform.get(f"/api/webhooks/deliveries/{delivery_id}")).json()
    assert delivery["status"] == "failed" and delivery["attempts"] == 3
    assert [a["status_code"] for a in delivery["attempt_log"]] == [503, 503, 503]
    assert delivery["last_error"] == "The receiver answered HTTP 503."


async def test_a_slow_receiver_times_out_and_is_retried(
    make_platform: PlatformFactory, receiver: Receiver
) -> None:
    platform = await make_platform(webhook_max_attempts=2, webhook_timeout=0.5)
    await platform.subscribe(f"{receiver.url}/hook/slow", "campaign.contact.completed")
    [delivery_id] = await platform.publish("campaign.contact.completed", {"contact_id": "cct_4"})
    delivery = (await platform.get(f"/api/webhooks/deliveries/{delivery_id}")).json()
    assert delivery["status"] == "failed" and delivery["attempts"] == 2
    assert [a["error"] for a in delivery["attempt_log"]] == ["The receiver did not answer in time."] * 2
    assert [a["status_code"] for a in delivery["attempt_log"]] == [None, None]


async def test_a_client_error_is_not_retried(platform: Platform, receiver: Receiver) -> None:
    await platform.subscribe(f"{receiver.url}/hook/status/410", "campaign.contact.completed")
    [delivery_id] = await platform.publish("campaign.contact.completed", {"contact_id": "cct_5"})
    delivery = (await platform.get(f"/api/webhooks/deliveries/{delivery_id}")).json()
    assert delivery["status"] == "failed" and delivery["attempts"] == 1
    assert delivery["attempt_log"][0]["outcome"] == "permanent"


def test_the_default_schedule_spans_about_a_day() -> None:
    settings = Settings()
    delays = [retry_delay(settings, n) for n in range(1, settings.webhook_max_attempts)]
    assert delays == sorted(delays) and delays[0] == 30.0
    assert 20 * 3600 <= sum(delays) <= 26 * 3600


async def test_test_send(platform: Platform, receiver: Receiver) -> None:
    path = unique("test")
    subscription = await platform.subscribe(f"{receiver.url}{path}", "call.ended")
    sent = await platform.post(
        f"/api/webhooks/subscriptions/{subscription['id']}/test", {"event_type": "call.analyzed"}
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["kind"] == "test" and sent.json()["delivered"] is True
    [event] = events(receiver, path)
    assert event["test"] is True and event["type"] == "call.analyzed"
    assert set(event["data"]) >= {"summary", "extracted", "analysis_status"}

    down = await platform.subscribe(f"{receiver.url}/hook/status/500", "call.ended")
    failed = await platform.post(f"/api/webhooks/subscriptions/{down['id']}/test", {})
    assert failed.status_code == 502, failed.text
    body = failed.json()
    assert body["code"] == "webhook_failed" and "HTTP 500" in body["detail"]
    assert body["delivery"]["status"] == "failed" and body["delivery"]["attempts"] == 1
    logged = await deliveries(platform, kind="test", subscription_id=down["id"])
    assert [d["id"] for d in logged] == [body["delivery"]["id"]]

    slow = await platform.subscribe(f"{receiver.url}/hook/slow", "call.ended")
    late = await platform.post(f"/api/webhooks/subscriptions/{slow['id']}/test", {})
    assert late.status_code == 504 and late.json()["code"] == "webhook_timeout"


async def test_secrets_are_encrypted_and_masked(platform: Platform, db_session: AsyncSession) -> None:
    created = await platform.subscribe("http://127.0.0.1:9/hook/ok", "call.ended")
    assert created["secret"] != SECRET and created["secret"].endswith(SECRET[-4:])
    assert SECRET not in json.dumps(created)
    for response in (
        await platform.get(f"/api/webhooks/subscriptions/{created['id']}"),
        await platform.get("/api/webhooks/subscriptions"),
    ):
        assert response.status_code == 200 and SECRET not in response.text
    row = await db_session.scalar(select(WebhookSubscription).where(WebhookSubscription.id == created["id"]))
    assert row is not None and SECRET not in row.secret
    rotated = await platform.client.patch(
        f"/api/webhooks/subscriptions/{created['id']}",
        json={"secret": "a-brand-new-secret-9876"},
        headers=platform.headers,
    )
    assert rotated.status_code == 200 and rotated.json()["secret"].endswith("9876")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://127.0.0.1/x", "event_types": ["call.ended"]}, "url"),
        ({"url": "http://10.20.30.40/hook", "event_types": ["call.ended"]}, "url"),
        # urlsplit raises ValueError on an unclosed IPv6 bracket: was a 500
        ({"url": "http://[::1/hook", "event_types": ["call.ended"]}, "url"),
        ({"url": "http://127.0.0.1:9/x", "event_types": ["call.exploded"]}, "event_types"),
        ({"url": "http://127.0.0.1:9/x", "event_types": []}, "event_types"),
        ({"url": "http://127.0.0.1:9/x", "event_types": ["call.ended"], "secret": "short"}, "secret"),
    ],
)
async def test_bad_subscriptions_are_refused_with_a_reason(
    platform: Platform, body: dict[str, Any], field: str
) -> None:
    response = await platform.post("/api/webhooks/subscriptions", {"secret": SECRET, **body})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(field in [str(p) for p in e["loc"]] for e in errors), errors
    assert all(e["msg"] for e in errors)


async def test_another_organization_sees_nothing(make_platform: PlatformFactory, receiver: Receiver) -> None:
    alice, bob = await make_platform(), await make_platform()
    path = unique("isolated")
    theirs = await bob.subscribe(f"{receiver.url}{path}", *ALL)
    [delivery_id] = await bob.publish("campaign.contact.completed", {"contact_id": "cct_6"})
    await alice.publish("campaign.contact.completed", {"contact_id": "cct_alice"})
    assert [e["data"]["contact_id"] for e in events(receiver, path)] == ["cct_6"]

    sub = f"/api/webhooks/subscriptions/{theirs['id']}"
    assert (await alice.get(sub)).status_code == 404
    assert (await alice.client.patch(sub, json={"active": False}, headers=alice.headers)).status_code == 404
    assert (await alice.post(f"{sub}/test", {})).status_code == 404
    assert (await alice.client.delete(sub, headers=alice.headers)).status_code == 404
    assert (await alice.get(f"/api/webhooks/deliveries/{delivery_id}")).status_code == 404
    assert await deliveries(alice) == []
    assert [s["id"] for s in (await alice.get("/api/webhooks/subscriptions")).json()["items"]] == []
    assert (await bob.client.delete(sub, headers=bob.headers)).status_code == 200
    # Deleting Bob's organization removes its events, deliveries and attempts (children first).
    gone = await bob.client.delete(
        f"/api/organizations/{bob.org}", headers={"Authorization": bob.headers["Authorization"]}
    )
    assert gone.status_code == 200, gone.text
    async with unit_of_work(bob.database, write=False) as session:
        for model in (WebhookEvent, WebhookDelivery, WebhookAttempt, WebhookSubscription):
            assert await session.scalar(select(model.id).where(model.organization_id == bob.org)) is None


async def test_unqueued_deliveries_are_recovered_and_sent_once(
    platform: Platform, receiver: Receiver
) -> None:
    from parley.kit.jobs import runner_for
    from parley.webhooks.service import DELIVER_JOB, publish_event
    from parley.webhooks.tasks import unfinished

    path = unique("recovered")
    await platform.subscribe(f"{receiver.url}{path}", "campaign.contact.completed")
    async with unit_of_work(platform.database) as session:  # no job queue: stored, nothing queued
        [delivery_id] = await publish_event(
            session, platform.org, "campaign.contact.completed", {"contact_id": "cct_7"}
        )
    assert receiver.at(path) == []
    async with unit_of_work(platform.database, write=False) as session:
        assert {"delivery_id": delivery_id} in await unfinished(session)
    runner = runner_for(platform.app.state)
    for _ in range(2):  # the same job twice (a recovery racing a retry): one send
        runner.enqueue(DELIVER_JOB, {"delivery_id": delivery_id})
    await platform.drain()
    assert len(receiver.at(path)) == 1
    async with unit_of_work(platform.database, write=False) as session:
        assert {"delivery_id": delivery_id} not in await unfinished(session)
    delivery = (await platform.get(f"/api/webhooks/deliveries/{delivery_id}")).json()
    assert delivery["status"] == "delivered" and delivery["attempts"] == 1
