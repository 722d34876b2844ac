"""Campaign fixtures: the app against the local Twilio and LiveKit servers (tests/telephony's), an
organization with a published flow, Twilio configured and a caller id, and helpers to deliver Twilio's
signed callbacks and run the job queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.stubs import twilio as tw_stub
from tests.telephony.conftest import (  # noqa: F401  (fixtures)
    PUBLIC_URL,
    Org,
    Stub,
    _livekit_server,
    _twilio_server,
    livekit,
    new_org,
    twilio,
)

CALLER_ID = "+4930777000"
ALWAYS = [{"weekdays": [1, 2, 3, 4, 5, 6, 7], "start": "00:00", "end": "24:00"}]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.outbound_timeout = 5.0
    settings.public_url = PUBLIC_URL
    # Follow-up rounds are scheduled far away: the tests run each round themselves (a nudge + drain).
    settings.campaign_poll_seconds = 3600
    return settings


@dataclass
class Harness:
    app: Any
    client: httpx.AsyncClient

    async def drain(self) -> None:
        await self.app.state.jobs.drain(60)

    async def nudge(self, campaign_id: str) -> None:
        await self.app.state.jobs.submit("campaigns.tick", {"campaign_id": campaign_id})
        await self.drain()

    async def deliver(self, callback: tw_stub.Callback | None) -> httpx.Response:
        """Post a Twilio callback (built and signed by the stub) to the app, then run what it queued."""
        assert callback is not None
        assert callback.url.startswith(PUBLIC_URL)
        response = await self.client.post(
            callback.url[len(PUBLIC_URL) :], data=callback.params, headers=callback.headers
        )
        await self.drain()
        return response


@pytest.fixture
async def harness(settings: Settings, database: Database) -> AsyncIterator[Harness]:
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test") as c:
        yield Harness(app, c)


@pytest.fixture
async def org(harness: Harness, twilio: Stub) -> Org:  # noqa: F811
    """An organization with a published flow, Twilio configured against the stub and a caller id."""
    org = await new_org(harness.client)
    await org.configure(
        "twilio",
        {"account_sid": tw_stub.ACCOUNT_SID, "auth_token": tw_stub.AUTH_TOKEN, "api_base": twilio.url},
    )
    twilio.state.add_number(CALLER_ID)
    await org.make("/api/telephony/numbers", {"number": CALLER_ID, "provider": "twilio"})
    return org


async def make_campaign(org: Org, **fields: Any) -> dict[str, Any]:
    body = {"name": "Rückrufe", "flow_id": org.flow_id, "caller_id": CALLER_ID, "windows": ALWAYS, **fields}
    return await org.make("/api/campaigns", body)


async def upload_csv(org: Org, campaign_id: str, text: str | bytes) -> httpx.Response:
    content = text.encode() if isinstance(text, str) else text
    return await org.client.post(
        f"/api/campaigns/{campaign_id}/contacts",
        content=content,
        headers={**org.headers, "Content-Type": "text/csv"},
    )


async def contacts(org: Org, campaign_id: str) -> dict[str, dict[str, Any]]:
    response = await org.get(f"/api/campaigns/{campaign_id}/contacts?limit=200")
    assert response.status_code == 200, response.text
    return {c["phone"]: c for c in response.json()["items"]}
