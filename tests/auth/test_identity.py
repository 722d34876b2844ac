"""Issue 18, identity: token lifetimes, no long-lived credential in a URL, limits per organization and
per address (failed authentication, signed webhooks, the OAuth callback), through the HTTP interface."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.auth.conftest import assert_error, assert_unauthorized
from tests.conftest import auth, make_token

ME = "/api/me"


def _client(app: Any, address: str = "10.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://parley.test")


@pytest.fixture
async def strict_app(settings: Settings, database: Database) -> AsyncIterator[Any]:
    settings.auth_failures_per_minute = 4
    settings.rate_limit_org_per_minute = 6
    settings.rate_limit_address_per_minute = 3
    yield create_app(settings, database=database)


def _assert_limited(response: httpx.Response, *fragments: str) -> None:
    assert_error(response, 429, "rate_limited", *fragments)
    assert int(response.headers["retry-after"]) >= 1


# --- token lifetime ----------------------------------------------------------------------------------


async def test_a_token_valid_for_a_hundred_years_is_refused(client: httpx.AsyncClient) -> None:
    forever = make_token("methuselah", ttl=100 * 365 * 24 * 3600)
    detail = assert_unauthorized(await client.get(ME, headers=auth(forever)), "longer than")
    assert "PARLEY_AUTH_MAX_TOKEN_LIFETIME_SECONDS" in detail
    assert (await client.get(ME, headers=auth(make_token("methuselah", ttl=3600)))).status_code == 200


async def test_the_maximum_lifetime_is_configurable(settings: Settings, database: Database) -> None:
    settings.auth_max_token_lifetime_seconds = 600
    async with _client(create_app(settings, database=database)) as client:
        assert (await client.get(ME, headers=auth(make_token(ttl=600)))).status_code == 200
        assert_unauthorized(await client.get(ME, headers=auth(make_token(ttl=601))), "longer than the 600 s")


async def test_without_iat_the_lifetime_counts_from_now(settings: Settings) -> None:
    from parley.auth.tokens import TokenVerifier
    from parley.kit.errors import Unauthorized

    verifier = TokenVerifier(settings)
    payload = {"sub": "no-iat", "exp": int(time.time()) + 200 * 24 * 3600}
    with pytest.raises(Unauthorized, match="longer than"):
        verifier._check_lifetime(payload)
    verifier._check_lifetime({"sub": "no-iat", "exp": int(time.time()) + 3600})


# --- credentials in URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize("parameter", ["token", "access_token", "api_key"])
async def test_a_long_lived_credential_in_the_query_string_is_refused(
    client: httpx.AsyncClient, parameter: str
) -> None:
    token = make_token("url-user")
    assert_unauthorized(
        await client.get(ME, params={parameter: token}), "not accepted in a URL", "audio-token"
    )
    # Even beside a valid header: the URL already leaked it, say so rather than use it quietly.
    assert_unauthorized(
        await client.get(ME, params={parameter: token}, headers=auth(token)), "not accepted in a URL"
    )


# --- failed authentication per address ---------------------------------------------------------------


async def test_bad_keys_from_one_address_are_refused_with_429(strict_app: Any) -> None:
    good = auth(make_token("patient"))
    async with _client(strict_app, "10.9.9.9") as guesser, _client(strict_app, "10.1.1.1") as other:
        for n in range(4):
            bad = f"pk_{'0' * 26}_{'x' * 30}{n}"
            assert_unauthorized(await guesser.get(ME, headers=auth(bad)), "API key")
        _assert_limited(await guesser.get(ME, headers=auth("pk_garbage")), "failed authentication")
        # the address is refused before its credential is even looked at, valid or not
        _assert_limited(await guesser.get(ME, headers=good), "failed authentication")
        # another address is not affected
        assert (await other.get(ME, headers=good)).status_code == 200


async def test_forged_jwts_count_as_failures_too(strict_app: Any) -> None:
    forged = jwt.encode(
        {"sub": "mallory", "iat": int(time.time()), "exp": int(time.time()) + 60}, "x" * 40, algorithm="HS256"
    )
    async with _client(strict_app, "10.9.9.8") as client:
        statuses = [(await client.get(ME, headers=auth(forged))).status_code for _ in range(5)]
    assert statuses == [401, 401, 401, 401, 429]


async def test_a_missing_credential_is_not_a_failed_guess(strict_app: Any) -> None:
    async with _client(strict_app, "10.9.9.7") as client:
        statuses = [(await client.get(ME)).status_code for _ in range(6)]
        assert statuses == [401] * 6
        assert (await client.get(ME, headers=auth(make_token("late")))).status_code == 200


# --- per organization ---------------------------------------------------------------------------------


async def test_one_organization_shares_one_limit_across_its_keys(strict_app: Any) -> None:
    owner_token, other_token = make_token("busy-owner"), make_token("quiet-owner")
    async with _client(strict_app, "10.2.2.2") as client:
        created = await client.post("/api/organizations", json={"name": "Busy"}, headers=auth(owner_token))
        org = created.json()["id"]
        created = await client.post("/api/organizations", json={"name": "Quiet"}, headers=auth(other_token))
        quiet = created.json()["id"]
        keys = []
        for name in ("one", "two"):  # two of the organization's six requests this minute
            created = await client.post(
                "/api/api-keys", json={"name": name, "scopes": ["read"]}, headers=auth(owner_token, org)
            )
            assert created.status_code == 200, created.text
            keys.append(created.json()["secret"])
        responses = [await client.get("/api/flows", headers=auth(keys[n % 2])) for n in range(5)]
        assert [r.status_code for r in responses] == [200, 200, 200, 200, 429]
        _assert_limited(responses[-1], "organization", "6 requests per minute")
        # the owner's own token counts against the same organization
        _assert_limited(await client.get("/api/flows", headers=auth(owner_token, org)), "organization")
        # another organization is not affected
        assert (await client.get("/api/flows", headers=auth(other_token, quiet))).status_code == 200


# --- per address, public routes ------------------------------------------------------------------------


async def test_the_oauth_callback_is_limited_per_address(strict_app: Any) -> None:
    async with _client(strict_app, "10.3.3.3") as client, _client(strict_app, "10.3.3.4") as other:
        statuses = [
            (
                await client.get("/api/integrations/oauth/callback", params={"state": "x", "code": "y"})
            ).status_code
            for _ in range(4)
        ]
        assert statuses == [400, 400, 400, 429]
        assert (await other.get("/api/integrations/oauth/callback", params={"state": "x"})).status_code == 400


async def test_forged_twilio_webhooks_from_one_address_are_refused_with_429(strict_app: Any) -> None:
    form = {"CallSid": "CA" + "1" * 32, "AccountSid": "AC" + "2" * 32, "From": "+15550001", "To": "+15550002"}
    async with _client(strict_app, "10.4.4.4") as client:
        statuses = []
        for _ in range(5):
            response = await client.post(
                "/api/telephony/twilio/voice", data=form, headers={"X-Twilio-Signature": "forged"}
            )
            statuses.append(response.status_code)
        assert statuses == [403, 403, 403, 403, 429]


async def test_forged_whatsapp_webhooks_from_one_address_are_refused_with_429(strict_app: Any) -> None:
    body = b'{"object": "whatsapp_business_account", "entry": []}'
    async with _client(strict_app, "10.5.5.5") as client:
        statuses = []
        for _ in range(5):  # unsigned deliveries
            response = await client.post(
                "/api/channels/whatsapp/webhook", content=body, headers={"Content-Type": "application/json"}
            )
            statuses.append(response.status_code)
    assert statuses == [403, 403, 403, 403, 429]
