"""Issue 18: the OAuth ``state`` is bound to the browser that started the connect.

The connect sets a cookie (HttpOnly, SameSite=Lax, scoped to the callback's path, Secure behind
https); the callback refuses a state that arrives without it, as when an attacker who learned a
state (or a victim lured into the attacker's flow) finishes it in another browser.
"""

from __future__ import annotations

from typing import Any

import httpx

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database
from tests.integrations.conftest import PUBLIC_URL, Provider, admin_headers
from tests.integrations.helpers import CALLBACK, browse, connect, put_client


def _set_cookie(response: httpx.Response) -> str:
    cookies = response.headers.get_list("set-cookie")
    assert len(cookies) == 1, cookies
    return cookies[0]


async def _start(client: httpx.AsyncClient, provider: Provider) -> tuple[dict[str, Any], str]:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    response = await client.post("/api/integrations/acme/connect", json={}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json(), _set_cookie(response)


async def test_connect_sets_a_path_scoped_http_only_cookie(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    _, cookie = await _start(client, provider)
    attributes = [part.strip().lower() for part in cookie.split(";")]
    assert attributes[0].startswith("parley_oauth_ost_")
    assert "httponly" in attributes and "samesite=lax" in attributes
    assert f"path={CALLBACK}" in attributes
    assert "secure" not in attributes  # PARLEY_PUBLIC_URL is http here
    assert any(a.startswith("max-age=") for a in attributes)


async def test_a_state_finished_in_another_browser_is_refused(
    client: httpx.AsyncClient, app: Any, provider: Provider
) -> None:
    started, _ = await _start(client, provider)
    callback = await browse(started["authorization_url"])
    # Another browser: the same app, no cookies.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=PUBLIC_URL) as other:
        refused = await other.get(callback)
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "bad_request"
        assert "started in another browser" in refused.json()["detail"]
        # A forged cookie of the right name does not help.
        name = next(iter(client.cookies.keys()))
        other.cookies.set(name, "forged-value", domain="parley.test", path=CALLBACK)
        forged = await other.get(callback)
        assert forged.status_code == 400 and "another browser" in forged.json()["detail"]
    # The browser that started it still completes it: the refusals did not use the state up.
    finished = await client.get(callback)
    assert finished.status_code == 200, finished.text
    assert finished.json()["provider"] == "acme"


async def test_the_cookie_is_secure_behind_https(
    settings: Settings, database: Database, provider: Provider
) -> None:
    settings.public_url = "https://parley.test"
    app = create_app(settings, database=database)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://parley.test"
    ) as client:
        _, cookie = await _start(client, provider)
    assert "secure" in [part.strip().lower() for part in cookie.split(";")]


async def test_two_connects_in_one_browser_keep_their_own_cookies(
    client: httpx.AsyncClient, provider: Provider
) -> None:
    headers = await admin_headers(client)
    await put_client(client, headers, provider)
    started = [await connect(client, headers) for _ in range(2)]
    assert len(client.cookies) == 2  # the second connect did not overwrite the first one's cookie
    callbacks = [await browse(s["authorization_url"]) for s in started]
    first = await client.get(callbacks[0])
    assert first.status_code == 200, first.text
