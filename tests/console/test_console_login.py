"""Signing in to the console through an identity provider: the local OAuth 2.0 server of
``tests/stubs/oauth2.py`` (authorization code with PKCE, a confidential client, a userinfo endpoint) on
loopback, the platform under uvicorn on a migrated database, Chromium following the redirects."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import ConfigError, Settings, prepare_settings
from parley.login import service
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.playground.browser import require_browser
from tests.stubs.oauth2 import OAuth2Stub, StubClient, build_app

TIMEOUT_MS = 60_000
SUBJECT = "user-1"  # what the stub's userinfo answers


@pytest.fixture(scope="module")
def idp() -> Iterator[tuple[OAuth2Stub, str]]:
    stub = OAuth2Stub()
    stub.register(StubClient("parley-console", "console-secret"))
    with serve_in_thread(build_app(stub)) as url:
        yield stub, url


def _settings(tmp: Any, database_url: str, idp_url: str | None) -> Settings:
    login: dict[str, Any] = {}
    if idp_url:
        login = {
            "login_provider_name": "Stub ID",
            "login_authorize_url": f"{idp_url}/authorize",
            "login_token_url": f"{idp_url}/token",
            "login_userinfo_url": f"{idp_url}/userinfo",
            "login_client_id": "parley-console",
            "login_client_secret": "console-secret",
        }
    return prepare_settings(
        Settings(
            data_dir=tmp,
            database_url=database_url,
            auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
            rate_limit_per_minute=0,
            outbound_allowlist=["127.0.0.1"],
            log_level="WARNING",
            log_json=False,
            **login,
        )
    )


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    idp: tuple[OAuth2Stub, str],
) -> Iterator[dict[str, Any]]:
    settings = _settings(tmp_path_factory.mktemp("console_login"), database_url, idp[1])
    with serve_in_thread(create_app(settings)) as base:
        owner = {"Authorization": f"Bearer {make_token('login-owner', ttl=3600)}"}
        org = httpx.post(f"{base}/api/organizations", json={"name": "Anmeldung GmbH"}, headers=owner)
        assert org.status_code < 300, org.text
        org_id = org.json()["id"]
        member = httpx.post(
            f"{base}/api/organizations/{org_id}/members",
            json={"subject": SUBJECT, "name": "Ulla User", "role": "member"},
            headers={**owner, "X-Organization-Id": org_id},
        )
        assert member.status_code < 300, member.text
        yield {"url": base, "org": org_id, "stub": idp[0]}


@pytest.fixture(scope="module")
def browser(platform: dict[str, Any]) -> Iterator[Any]:
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        yield page
    finally:
        context.close()


def test_sign_in_with_the_provider_completes_and_uses_the_token(page: Any, platform: dict[str, Any]) -> None:
    stub: OAuth2Stub = platform["stub"]
    stub.decision = "allow"
    page.goto(f"{platform['url']}/console")
    page.get_by_role("link", name="Sign in with Stub ID").click()
    # the provider saw PKCE and this server's callback, and the console came back signed in
    page.get_by_role("navigation").wait_for()
    page.get_by_role("heading", level=1, name="Overview").wait_for()
    asked = stub.authorize_requests[-1]
    assert asked["code_challenge_method"] == "S256" and asked["redirect_uri"].endswith(service.CALLBACK_PATH)
    assert [g["grant_type"] for g in stub.grants][-1] == "authorization_code"
    assert page.locator("#who").text_content() == "Ulla User"
    assert page.locator("#org option").first.text_content() == "Anmeldung GmbH (member)"
    # the token is Parley's own, kept in the tab (never in the URL), and the API accepts it
    token = page.evaluate("() => sessionStorage.getItem('parley.console.token')")
    assert token and token not in page.url and "code=" not in page.url
    me = httpx.get(f"{platform['url']}/api/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200 and me.json()["subject"] == SUBJECT
    # the handed-over token was taken once: the cookie is gone
    again = page.evaluate(
        "() => fetch('/api/auth/login/token', {method: 'POST', credentials: 'same-origin'}).then((r) => r.status)"
    )
    assert again == 400


def test_a_refusal_at_the_provider_is_explained_on_the_sign_in_form(
    page: Any, platform: dict[str, Any]
) -> None:
    stub: OAuth2Stub = platform["stub"]
    stub.decision = "deny"
    try:
        page.goto(f"{platform['url']}/console")
        page.get_by_role("link", name="Sign in with Stub ID").click()
        error = page.locator("#signin-error", has_text="did not sign you in: access_denied")
        error.wait_for()
        assert "did not work" in str(error.text_content())
        assert page.evaluate("() => sessionStorage.getItem('parley.console.token')") is None
    finally:
        stub.decision = "allow"


def test_a_callback_from_another_browser_is_refused(platform: dict[str, Any]) -> None:
    """The provider's redirect without the starting browser's cookie signs nobody in."""
    start = httpx.get(f"{platform['url']}/api/auth/login/start")
    assert start.status_code == 302 and "code_challenge=" in start.headers["location"]
    cookie = start.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")
    authorize = httpx.get(start.headers["location"])  # the provider allows and redirects back
    back = authorize.headers["location"]
    assert "code=" in back
    refused = httpx.get(back)  # no cookie: another browser
    assert refused.status_code == 302
    assert re.search(r"#/signin\?error=.*not%20started%20in%20this%20browser", refused.headers["location"])
    assert "parley_login_token" not in refused.headers.get("set-cookie", "")


def test_the_button_is_offered_only_where_configured(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    platform: dict[str, Any],
    page: Any,
) -> None:
    options = httpx.get(f"{platform['url']}/api/auth/login").json()
    assert options == {"enabled": True, "provider": "Stub ID", "start_path": "/api/auth/login/start"}
    settings = _settings(tmp_path_factory.mktemp("console_nologin"), database_url, None)
    with serve_in_thread(create_app(settings)) as base:
        assert httpx.get(f"{base}/api/auth/login").json()["enabled"] is False
        page.goto(f"{base}/console")
        page.get_by_label("Token or API key").wait_for()
        page.wait_for_function("() => document.getElementById('provider-login').hidden === true")
        assert page.get_by_role("link", name=re.compile("Sign in with")).count() == 0
        missing = httpx.get(f"{base}/api/auth/login/start")
        assert missing.status_code == 404 and "No identity provider" in missing.json()["detail"]


def test_a_tampered_or_expired_state_cookie_is_not_taken(tmp_path: Any) -> None:
    settings = _settings(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", "http://127.0.0.1:9")
    _, cookie = service.start(settings, "http://127.0.0.1:8000")
    assert service.unseal(settings, cookie, "state") is not None
    body, mac = cookie.split(".")
    assert service.unseal(settings, f"{body}x.{mac}", "state") is None  # changed
    assert service.unseal(settings, cookie, "token") is None  # another kind
    expired = service.seal(settings, {"kind": "state", "state": "s", "verifier": "v", "exp": 1})
    assert service.unseal(settings, expired, "state") is None


def test_half_a_login_configuration_is_refused_at_start(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="PARLEY_LOGIN_CLIENT_ID"):
        prepare_settings(Settings(data_dir=tmp_path, login_client_id="parley-console"))


def test_non_ascii_state_or_cookie_is_refused_not_a_500(platform: dict[str, Any]) -> None:
    """hmac.compare_digest raises TypeError on non-ASCII str; the comparisons are on bytes."""
    start = httpx.get(f"{platform['url']}/api/auth/login/start")
    cookie = start.cookies[service.STATE_COOKIE]
    back = httpx.get(
        f"{platform['url']}/api/auth/login/callback",
        params={"code": "x", "state": "zustand-ä"},
        cookies={service.STATE_COOKIE: cookie},
    )
    assert back.status_code == 302, back.text
    assert "state%20does%20not%20match" in back.headers["location"]
    taken = httpx.post(
        f"{platform['url']}/api/auth/login/token",
        headers={"Cookie": f"{service.TOKEN_COOKIE}=a.ä".encode()},
    )
    assert taken.status_code == 400, taken.text
    assert "No finished sign-in" in taken.json()["detail"]
