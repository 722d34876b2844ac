"""Distributed mode: the campaign's rounds run in a worker on the Redis queue (as `parley worker` does),
not in the app; the status callback reaches the app and the worker dials the retry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from parley.app import create_app
from parley.campaigns.models import CampaignContact
from parley.config import Settings
from parley.kit.queue import QueueWorker, worker_context
from parley.worker import load_tasks
from tests import migrated
from tests.campaigns.conftest import ALWAYS, CALLER_ID, PUBLIC_URL
from tests.conftest import JWT_SECRET
from tests.distributed.conftest import redis_prefix  # noqa: F401  (fixture)
from tests.distributed.redis_env import REDIS_URL
from tests.stubs import twilio as tw_stub
from tests.telephony.conftest import Stub, new_org


async def _until(check: Callable[[], bool], attempts: int = 600) -> None:
    """Poll ``check()`` (bounded by attempts, not by a deadline)."""
    for _ in range(attempts):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition was not met")


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    return migrated.sqlite_url(tmp_path / "parley.db")


async def test_a_worker_on_the_redis_queue_runs_the_campaign(
    tmp_path: Path,
    db_file: str,
    redis_prefix: str,  # noqa: F811
    twilio: Stub,
) -> None:
    url = db_file
    settings = Settings(
        data_dir=tmp_path,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        redis_url=REDIS_URL,
        redis_prefix=redis_prefix,
        outbound_allowlist=["127.0.0.1"],
        public_url=PUBLIC_URL,
        campaign_poll_seconds=0.2,
        log_json=False,
    )
    load_tasks()
    app = create_app(settings)
    context = worker_context(settings)
    worker = QueueWorker(context, settings, handle_signals=False, poll_delay=0.05)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test") as client,
    ):
        org = await new_org(client)
        await org.configure(
            "twilio",
            {"account_sid": tw_stub.ACCOUNT_SID, "auth_token": tw_stub.AUTH_TOKEN, "api_base": twilio.url},
        )
        twilio.state.add_number(CALLER_ID)
        await org.make("/api/telephony/numbers", {"number": CALLER_ID, "provider": "twilio"})
        body = {"name": "Redis", "flow_id": org.flow_id, "caller_id": CALLER_ID, "windows": ALWAYS}
        campaign = await org.make("/api/campaigns", {**body, "concurrency": 2, "max_attempts": 2})
        upload = await client.post(
            f"/api/campaigns/{campaign['id']}/contacts",
            content=b"phone\n+491701111111\n+491702222222\n",
            headers={**org.headers, "Content-Type": "text/csv"},
        )
        assert upload.status_code == 200, upload.text
        assert (await org.post(f"/api/campaigns/{campaign['id']}/start")).status_code == 200
        running = asyncio.create_task(worker.run())
        try:
            await _until(lambda: len(twilio.state.calls) == 2)
            assert sorted(c["To"] for c in twilio.state.calls) == ["+491701111111", "+491702222222"]
            first, second = twilio.state.calls
            for call, status in ((first, "busy"), (second, "completed")):
                callback = twilio.state.finish(call["sid"], status)
                assert callback is not None
                answer = await client.post(
                    callback.url[len(PUBLIC_URL) :], data=callback.params, headers=callback.headers
                )
                assert answer.status_code == 204
            async with context.db.write_sessionmaker() as session:  # the backoff passes
                await session.execute(
                    update(CampaignContact)
                    .where(CampaignContact.next_attempt_at.is_not(None))
                    .values(next_attempt_at=datetime.now(UTC))
                )
                await session.commit()
            await _until(lambda: len(twilio.state.calls) == 3)  # the worker's next round dials the retry
            assert twilio.state.calls[2]["To"] == first["To"]
            callback = twilio.state.finish(twilio.state.calls[2]["sid"], "completed")
            assert callback is not None
            await client.post(callback.url[len(PUBLIC_URL) :], data=callback.params, headers=callback.headers)

            async def status() -> str:
                return str((await org.get(f"/api/campaigns/{campaign['id']}")).json()["status"])

            for _ in range(600):
                if await status() == "completed":
                    break
                await asyncio.sleep(0.05)
            assert await status() == "completed"
            assert len(twilio.state.calls) == 3
        finally:
            worker.stop()
            await running
            await context.state.jobs.stop()
            await context.db.dispose()
