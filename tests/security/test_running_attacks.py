"""The smaller findings of issue 18 reproduced against a real server (SQLite and PostgreSQL): IPv6 forms
that embed a private IPv4 address, the mutable sandbox, and a zip-bomb .docx while another tenant works."""

from __future__ import annotations

import time

import httpx
import pytest

from parley.knowledge import parsing
from tests.knowledge.test_caps import docx_bomb
from tests.security.conftest import Live, new_org


@pytest.fixture(scope="module")
def tenants(live: Live) -> tuple[dict[str, str], dict[str, str]]:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        return new_org(http, "run-mallory", "Mallory GmbH"), new_org(http, "run-bob", "Bob KG")


@pytest.mark.parametrize(
    "host",
    [
        "[64:ff9b::a00:1]",  # NAT64 of 10.0.0.1
        "[64:ff9b::a9fe:a9fe]",  # NAT64 of 169.254.169.254 (cloud metadata)
        "[2002:a00:1::1]",  # 6to4 of 10.0.0.1
        "[::10.0.0.1]",  # IPv4-compatible
        "[::ffff:10.0.0.1]",  # IPv4-mapped
    ],
)
def test_ipv6_forms_of_a_private_address_are_refused(
    live: Live, tenants: tuple[dict[str, str], dict[str, str]], host: str
) -> None:
    mallory, _ = tenants
    with httpx.Client(base_url=live.url, timeout=60) as http:
        body = {"name": "probe", "type": "http", "config": {"method": "GET", "url": f"http://{host}:8080/x"}}
        tool = http.post("/api/tools", json=body, headers=mallory)
        assert tool.status_code == 200, tool.text
        report = http.post(f"/api/tools/{tool.json()['id']}/test", json={"arguments": {}}, headers=mallory)
        http.delete(f"/api/tools/{tool.json()['id']}", headers=mallory)
    assert report.status_code == 200, report.text
    # Refused by the guard before any connection (not a network error after trying one).
    assert report.json()["status"] == "error"
    assert "non-public address" in report.json()["error"], report.json()


def test_the_sandbox_is_immutable_at_run_time(
    live: Live, tenants: tuple[dict[str, str], dict[str, str]]
) -> None:
    mallory, _ = tenants
    with httpx.Client(base_url=live.url, timeout=60) as http:
        body = {
            "name": "mutator",
            "type": "http",
            "config": {
                "method": "GET",
                "url": "https://example.com/{{ args.o.update({'status': 'paid'}) }}{{ args.o.status }}",
                "parameters": {"type": "object", "properties": {"o": {"type": "object"}}},
            },
        }
        tool = http.post("/api/tools", json=body, headers=mallory)
        assert tool.status_code in (200, 422), tool.text
        if tool.status_code == 422:  # refused when saved: the template cannot change its variables
            assert "update" in tool.text or "unsafe" in tool.text.lower()
            return
        report = http.post(
            f"/api/tools/{tool.json()['id']}/test",
            json={"arguments": {"o": {"status": "open"}}},
            headers=mallory,
        )
        http.delete(f"/api/tools/{tool.json()['id']}", headers=mallory)
    assert report.status_code == 200, report.text
    assert report.json()["status"] == "error", report.json()  # never a request to .../Nonepaid


def test_a_zip_bomb_docx_fails_with_its_reason_while_another_tenant_works(
    live: Live, tenants: tuple[dict[str, str], dict[str, str]]
) -> None:
    mallory, bob = tenants
    bomb = docx_bomb("word/document.xml", 150 * 1024 * 1024)  # the shape: ~150 MB of XML
    assert len(bomb) < 400_000
    with httpx.Client(base_url=live.url, timeout=60) as http:
        uploaded = http.post("/api/knowledge/documents", files={"file": ("bomb.docx", bomb)}, headers=mallory)
        assert uploaded.status_code == 200, uploaded.text
        written = http.post(
            "/api/tools",
            json={"name": "bob_kb", "type": "http", "config": {"url": "https://example.com"}},
            headers=bob,
        )
        assert written.status_code == 200, written.text
        document = uploaded.json()
        for _ in range(600):  # bounded: the background job fails the document quickly
            document = http.get(f"/api/knowledge/documents/{document['id']}", headers=mallory).json()
            if document["status"] != "pending":
                break
            time.sleep(0.1)
    assert document["status"] == "failed", document
    assert document["chunk_count"] == 0
    assert f"at most {parsing.MAX_UNCOMPRESSED_BYTES:,}" in document["error"] or "100:1" in document["error"]
