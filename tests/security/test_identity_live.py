"""Identity findings of issue 18 against a real server (SQLite and PostgreSQL): a 100-year token, a
long-lived credential in a URL, a removed admin's key, a viewer's avatar upload, failed authentication
and one organization's many keys limited per address and per organization."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest
from PIL import Image

from parley.app import create_app
from tests.conftest import auth, make_token
from tests.live import serve_in_thread
from tests.security.conftest import Live, live_settings, new_org


def test_a_hundred_year_token_and_credentials_in_urls_are_refused(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        forever = make_token("live-methuselah", ttl=100 * 365 * 24 * 3600)
        refused = http.get("/api/me", headers=auth(forever))
        assert refused.status_code == 401 and "longer than" in refused.json()["detail"]
        alice = new_org(http, "live-url-alice", "URL GmbH")
        key = http.post("/api/api-keys", json={"name": "k", "scopes": ["read"]}, headers=alice).json()[
            "secret"
        ]
        for parameter in ("token", "access_token", "api_key"):
            leaked = http.get("/api/me", params={parameter: key})
            assert leaked.status_code == 401 and "not accepted in a URL" in leaked.json()["detail"]


def test_a_removed_admins_key_cannot_add_its_creator_back(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        owner = new_org(http, "live-keys-owner", "Keys GmbH")
        org_id = owner["X-Organization-Id"]
        added = http.post(
            f"/api/organizations/{org_id}/members",
            json={"subject": "live-keys-bob", "role": "admin"},
            headers=owner,
        )
        assert added.status_code == 200, added.text
        bob = auth(make_token("live-keys-bob"), org_id)
        key = http.post("/api/api-keys", json={"name": "bob's", "scopes": ["admin"]}, headers=bob).json()
        bearer = {"Authorization": f"Bearer {key['secret']}"}
        assert http.get("/api/me", headers=bearer).status_code == 200
        removed = http.delete(f"/api/organizations/{org_id}/members/{added.json()['user_id']}", headers=owner)
        assert removed.status_code == 200, removed.text
        readd = http.post(
            f"/api/organizations/{org_id}/members",
            json={"subject": "live-keys-bob", "role": "admin"},
            headers=bearer,
        )
        assert readd.status_code == 401 and "revoked" in readd.json()["detail"]


def test_a_viewer_cannot_upload_an_avatar_asset(live: Live) -> None:
    image = io.BytesIO()
    Image.new("RGB", (32, 32), "red").save(image, "PNG")
    with httpx.Client(base_url=live.url, timeout=30) as http:
        owner = new_org(http, "live-avatar-owner", "Avatar GmbH")
        org_id = owner["X-Organization-Id"]
        added = http.post(
            f"/api/organizations/{org_id}/members",
            json={"subject": "live-avatar-viewer", "role": "viewer"},
            headers=owner,
        )
        assert added.status_code == 200, added.text
        viewer = auth(make_token("live-avatar-viewer"), org_id)
        upload = http.post(
            "/api/uploads/avatar", files={"file": ("me.png", image.getvalue(), "image/png")}, headers=viewer
        )
        assert upload.status_code == 403, upload.text
        assets = http.get("/api/assets", headers=owner)
        assert assets.status_code == 200 and assets.json()["items"] == []


@pytest.fixture
def strict(fresh_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = live_settings(
        tmp_path_factory.mktemp("strict"),
        fresh_db,
        auth_failures_per_minute=5,
        rate_limit_org_per_minute=20,
        rate_limit_per_minute=1000,
    )
    with serve_in_thread(create_app(settings)) as url:
        yield url


@pytest.mark.slow
def test_failed_authentication_and_one_organization_are_limited(strict: str) -> None:
    with httpx.Client(base_url=strict, timeout=30) as http:
        alice = new_org(http, "strict-alice", "Strict GmbH")
        keys = [
            http.post("/api/api-keys", json={"name": f"k{i}", "scopes": ["read"]}, headers=alice).json()[
                "secret"
            ]
            for i in range(3)
        ]
        # One organization, many keys: the organization's limit holds across all of them.
        statuses = [
            http.get("/api/tools", headers={"Authorization": f"Bearer {keys[i % 3]}"}).status_code
            for i in range(30)
        ]
        assert 429 in statuses and statuses[0] == 200
        limited = http.get("/api/tools", headers={"Authorization": f"Bearer {keys[0]}"})
        assert limited.status_code == 429 and "Retry-After" in limited.headers

        # Guessing keys from one address: refused before the credential is checked, valid or not.
        bad = [
            http.get("/api/me", headers={"Authorization": "Bearer pk_wrong_guess"}).status_code
            for _ in range(6)
        ]
        assert bad[:5] == [401] * 5 and bad[5] == 429
        assert http.get("/api/me", headers=auth(make_token("strict-alice"))).status_code == 429
        forged = http.post(
            "/api/telephony/twilio/voice",
            data={"CallSid": "CA" + "0" * 32},
            headers={"X-Twilio-Signature": "x"},
        )
        assert forged.status_code == 429
