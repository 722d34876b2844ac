"""Brain signals → rules → delivery jobs: matching, retries with the real job runner, permanent
failures, throttling, idempotency and recovery."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import select, update

from parley.calls.service import record_call
from parley.kit.db import utcnow
from parley.kit.jobs import runner_for
from parley.notifications.models import NotificationDelivery
from parley.notifications.service import DELIVER_JOB
from parley.notifications.tasks import deliver, unfinished
from tests.calls.helpers import flow_signal, make_record
from tests.live import serve_in_thread
from tests.notifications.conftest import Mailbox, Platform, PlatformFactory, Receiver
from tests.notifications.helpers import create_channel, create_rule, email, verify_signature, webhook
from tests.stubs.openai import StubState, make_openai_stub


def unique(name: str) -> str:
    """A receiver path of this test alone (the receiver is shared by the SQLite and PostgreSQL runs)."""
    return f"/hook/flaky/{name}-{uuid4().hex[:8]}"


async def record(platform: Platform, *signals: tuple[str, str], drain: bool = True) -> str:
    """Store a call with these (type, severity) signals as a request does, then run the queued jobs."""
    runner = runner_for(platform.app.state)
    async with platform.database.write_sessionmaker() as session:
        call = await record_call(
            session, make_record(platform.org, signals=[flow_signal(t, s) for t, s in signals]), jobs=runner
        )
        await session.commit()
        for callback in session.info.pop("after_commit", []):
            await callback()
    if drain:
        await runner.drain()
    return call.id


async def deliveries(platform: Platform, **params: Any) -> list[dict[str, Any]]:
    response = await platform.client.get(
        "/api/notifications/deliveries", params=params, headers=platform.headers
    )
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


async def test_matching_rules_deliver_the_signal(
    platform: Platform, receiver: Receiver, smtp_server: Mailbox
) -> None:
    path = unique("match")
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    mail = await create_channel(platform.client, platform.headers, email(smtp_server))
    await create_rule(
        platform.client,
        platform.headers,
        signal_type="callback_requested",
        min_severity="medium",
        channel_id=hook["id"],
    )
    await create_rule(
        platform.client, platform.headers, signal_type="*", min_severity="high", channel_id=mail["id"]
    )
    await create_rule(
        platform.client,
        platform.headers,
        signal_type="*",
        min_severity="info",
        channel_id=hook["id"],
        enabled=False,
    )
    before_hook, before_mail = len(receiver.at(path)), len(smtp_server.messages)

    call_id = await record(platform, ("callback_requested", "high"), ("vip_customer", "low"))

    hooks = receiver.at(path)[before_hook:]
    assert len(hooks) == 1
    payload = json.loads(hooks[0].body)
    assert payload["event"] == "brain_signal.raised"
    assert payload["signal"]["type"] == "callback_requested" and payload["signal"]["severity"] == "high"
    assert payload["signal"]["call_id"] == call_id and payload["signal"]["summary"] == "flagged by flow"
    assert payload["links"]["call"].endswith(f"/api/calls/{call_id}")
    assert payload["title"] == "[HIGH] Callback requested"
    assert verify_signature(hooks[0].headers["x-parley-signature"], hooks[0].body)
    assert hooks[0].headers["x-parley-delivery"] == payload["id"]

    mails = smtp_server.messages[before_mail:]
    assert len(mails) == 1  # the low-severity vip_customer signal stays below the mail rule
    assert mails[0][2]["Subject"] == "[HIGH] Callback requested"
    assert call_id in mails[0][2].get_payload(decode=True).decode()  # type: ignore[union-attr]

    log = await deliveries(platform, kind="signal")
    assert sorted(d["channel_type"] for d in log) == ["email", "webhook"]
    assert all(d["status"] == "delivered" and d["attempts"] == 1 for d in log)
    signal_id = log[0]["signal_id"]
    assert (await deliveries(platform, signal_id=signal_id))[0]["signal_type"] == "callback_requested"


async def test_a_transient_failure_is_retried_until_delivered(platform: Platform, receiver: Receiver) -> None:
    path = unique("retry")
    receiver.fail_first[path] = 2
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await record(platform, ("complaint", "medium"))

    received = receiver.at(path)
    assert len(received) == 3
    assert len({r.headers["x-parley-delivery"] for r in received}) == 1  # one delivery, three attempts
    assert len({r.body for r in received}) == 1  # the same message every time
    [delivery] = await deliveries(platform, channel_id=hook["id"])
    assert delivery["status"] == "delivered" and delivery["attempts"] == 3
    assert [a["outcome"] for a in delivery["attempt_log"]] == ["transient", "transient", "delivered"]
    assert [a["status_code"] for a in delivery["attempt_log"]] == [500, 500, 200]
    assert [a["number"] for a in delivery["attempt_log"]] == [1, 2, 3]


async def test_retries_stop_after_the_last_attempt(
    make_platform: PlatformFactory, receiver: Receiver
) -> None:
    path = unique("never")
    from tests.notifications.conftest import LOOPBACK

    platform = await make_platform(**{**LOOPBACK, "notification_max_attempts": 3})
    receiver.fail_first[path] = 100
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await record(platform, ("complaint", "medium"))
    assert len(receiver.at(path)) == 3
    [delivery] = await deliveries(platform, channel_id=hook["id"])
    assert delivery["status"] == "failed" and delivery["attempts"] == 3
    assert "HTTP 500" in delivery["last_error"]


async def test_a_permanent_failure_is_not_retried(platform: Platform, receiver: Receiver) -> None:
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}/hook/status/410"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    before = len(receiver.at("/hook/status/410"))
    await record(platform, ("complaint", "medium"))
    assert len(receiver.at("/hook/status/410")) == before + 1
    [delivery] = await deliveries(platform, channel_id=hook["id"], status="failed")
    assert delivery["attempts"] == 1 and delivery["last_status_code"] == 410


async def test_a_later_retry_waits_for_its_time(make_platform: PlatformFactory, receiver: Receiver) -> None:
    path = unique("later")
    from tests.notifications.conftest import LOOPBACK

    platform = await make_platform(**{**LOOPBACK, "notification_retry_seconds": [3600.0]})
    receiver.fail_first[path] = 1
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await record(platform, ("complaint", "medium"))
    [delivery] = await deliveries(platform, channel_id=hook["id"])
    assert delivery["status"] == "retrying" and delivery["attempts"] == 1
    assert delivery["next_attempt_at"] is not None
    # Running the job before its time sends nothing; the restart recovery lists it.
    runner = runner_for(platform.app.state)
    await deliver(runner.context, {"delivery_id": delivery["id"]})
    assert len(receiver.at(path)) == 1
    async with platform.database.sessionmaker() as session:
        assert {"delivery_id": delivery["id"]} in await unfinished(session)
    # Once due, the job sends it.
    async with platform.database.write_sessionmaker() as session:
        await session.execute(
            update(NotificationDelivery)
            .where(NotificationDelivery.id == delivery["id"])
            .values(next_attempt_at=utcnow() - timedelta(seconds=1))
        )
        await session.commit()
    await deliver(runner.context, {"delivery_id": delivery["id"]})
    [done] = await deliveries(platform, channel_id=hook["id"])
    assert done["status"] == "delivered" and done["attempts"] == 2


async def test_a_delivery_job_is_idempotent(platform: Platform, receiver: Receiver) -> None:
    path = unique("once")
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await record(platform, ("complaint", "medium"), drain=False)
    runner = runner_for(platform.app.state)
    [pending] = await deliveries(platform, channel_id=hook["id"])
    assert pending["status"] == "pending"
    runner.enqueue(DELIVER_JOB, {"delivery_id": pending["id"]})  # a duplicate, e.g. from recovery
    await runner.drain()
    await deliver(runner.context, {"delivery_id": pending["id"]})
    assert len(receiver.at(path)) == 1
    [done] = await deliveries(platform, channel_id=hook["id"])
    assert done["attempts"] == 1 and done["status"] == "delivered"


async def test_a_claim_in_progress_is_left_alone(platform: Platform, receiver: Receiver) -> None:
    path = unique("claimed")
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await record(platform, ("complaint", "medium"), drain=False)
    [pending] = await deliveries(platform, channel_id=hook["id"])
    async with platform.database.write_sessionmaker() as session:
        await session.execute(
            update(NotificationDelivery)
            .where(NotificationDelivery.id == pending["id"])
            .values(status="sending", claimed_at=utcnow())
        )
        await session.commit()
    runner = runner_for(platform.app.state)
    await runner.drain()
    assert receiver.at(path) == []
    async with platform.database.sessionmaker() as session:
        assert {"delivery_id": pending["id"]} not in await unfinished(session)
        # A claim by a worker that died long ago is recovered.
        await session.execute(
            update(NotificationDelivery)
            .where(NotificationDelivery.id == pending["id"])
            .values(claimed_at=utcnow() - timedelta(hours=1))
        )
        await session.commit()
    async with platform.database.sessionmaker() as session:
        assert {"delivery_id": pending["id"]} in await unfinished(session)
    await deliver(runner.context, {"delivery_id": pending["id"]})
    assert len(receiver.at(path)) == 1


async def test_throttle_sends_one_per_signal_type(platform: Platform, receiver: Receiver) -> None:
    path = unique("throttle")
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(
        platform.client, platform.headers, signal_type="*", channel_id=hook["id"], throttle_minutes=30
    )
    await record(platform, ("complaint", "medium"), ("complaint", "high"))
    await record(platform, ("complaint", "medium"), ("order_not_found", "low"))
    sent = [json.loads(r.body)["signal"]["type"] for r in receiver.at(path)]
    assert sorted(sent) == ["complaint", "order_not_found"]


async def test_disabled_or_deleted_channels_do_not_send(platform: Platform, receiver: Receiver) -> None:
    path = unique("off")
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(platform.client, platform.headers, signal_type="*", channel_id=hook["id"])
    await platform.client.patch(
        f"/api/notifications/channels/{hook['id']}", json={"enabled": False}, headers=platform.headers
    )
    await record(platform, ("complaint", "medium"))
    assert receiver.at(path) == []
    assert await deliveries(platform, channel_id=hook["id"]) == []


async def test_no_rules_no_deliveries(platform: Platform) -> None:
    await record(platform, ("complaint", "critical"))
    assert await deliveries(platform) == []
    async with platform.database.sessionmaker() as session:
        assert (await session.scalars(select(NotificationDelivery.id))).all() == []


@pytest.fixture(scope="module")
def llm_stub() -> Iterator[str]:
    with serve_in_thread(make_openai_stub(StubState(slow_seconds=2.0))) as url:
        yield url


async def test_a_signal_raised_by_the_sentiment_job_is_delivered(
    platform: Platform, receiver: Receiver, llm_stub: str
) -> None:
    path = unique("sentiment")
    configured = await platform.client.put(
        "/api/providers/openai/config",
        json={"api_key": "sk-test-stub-key", "base_url": f"{llm_stub}/v1", "model": "stub-model"},
        headers=platform.headers,
    )
    assert configured.status_code == 200, configured.text
    hook = await create_channel(platform.client, platform.headers, webhook(f"{receiver.url}{path}"))
    await create_rule(
        platform.client, platform.headers, signal_type="negative_sentiment", channel_id=hook["id"]
    )
    runner = runner_for(platform.app.state)
    lines = [
        ("agent", "Guten Tag?"),
        ("caller", "Ich habe echt die Nase voll mit Ihnen."),
        ("agent", "Verstehe."),
    ]
    async with platform.database.write_sessionmaker() as session:
        await record_call(session, make_record(platform.org, lines=lines), jobs=runner)
        await session.commit()
        for callback in session.info.pop("after_commit", []):
            await callback()
    await runner.drain()  # the sentiment job raises the signal, then the delivery job sends it
    [request] = receiver.at(path)
    payload = json.loads(request.body)
    assert payload["signal"]["type"] == "negative_sentiment"
    assert payload["signal"]["details"]["method"] == "llm"
    assert payload["signal"]["summary"] == "The caller is clearly upset."
