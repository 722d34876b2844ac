"""API conformance found by the two-tenant schemathesis run (issue 18, item 9), against a real server."""

from __future__ import annotations

import httpx
import pytest

from tests.security.conftest import Live, new_org


@pytest.fixture(scope="module")
def tenant(live: Live) -> dict[str, str]:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        return new_org(http, "conf-alice", "Conformance GmbH")


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        ("/api/tools", {"GET", "POST"}),
        ("/api/flows", {"GET", "POST"}),
        ("/api/knowledge/documents", {"GET", "POST"}),
        ("/api/api-keys", {"GET", "POST"}),
    ],
)
def test_405_lists_every_method_of_the_path_in_allow(
    live: Live, tenant: dict[str, str], path: str, methods: set[str]
) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        response = http.put(path, json={}, headers=tenant)
        assert response.status_code == 405
        allowed = {m.strip() for m in response.headers["allow"].split(",")}
        assert methods <= allowed, allowed
        assert response.json()["code"] == "method_not_allowed"


def test_null_in_a_multipart_field_of_a_nullable_property_is_null(live: Live, tenant: dict[str, str]) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        created = http.post(
            "/api/tools",
            files={
                "name": (None, "nullable"),
                "type": (None, "http"),
                "description": (None, "Vorher"),
                "config": (None, '{"url": "https://example.com/x"}'),
            },
            headers=tenant,
        )
        assert created.status_code == 200, created.text
        tool = created.json()
        patched = http.patch(
            f"/api/tools/{tool['id']}", files={"description": (None, "null")}, headers=tenant
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["description"] is None
