"""Deeply nested bodies answer 422 with a sentence, never 500, and error bodies never echo a body in full
(issue 18, item 7)."""

from __future__ import annotations

import httpx
import pytest

from parley.kit.body import MAX_JSON_DEPTH
from tests.security.conftest import Live, new_org


def nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def nested_list(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture(scope="module")
def alice(live: Live) -> dict[str, str]:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        return new_org(http, "depth-alice", "Depth GmbH")


def _assert_too_deep(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail[0]["type"] == "json_too_deep", detail
    assert f"nested more than {MAX_JSON_DEPTH} levels" in detail[0]["msg"]
    assert len(response.content) < 2000  # the body is never echoed


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 100_000])
@pytest.mark.parametrize("media_type", ["application/json", "text/plain"])
def test_deep_json_bodies_are_422(live: Live, alice: dict[str, str], depth: int, media_type: str) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        tool = (
            '{"name":"deep","type":"http","config":{"url":"https://example.com","parameters":'
            + nested_object(depth)
            + "}}"
        )
        _assert_too_deep(http.post("/api/tools", content=tool, headers={**alice, "content-type": media_type}))
        flow = '{"name":"deep","definition":' + nested_list(depth) + "}"
        _assert_too_deep(http.post("/api/flows", content=flow, headers={**alice, "content-type": media_type}))


def test_deep_json_in_a_multipart_field_is_422(live: Live, alice: dict[str, str]) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        response = http.post(
            "/api/flows",
            files={"name": (None, "deep"), "definition": (None, nested_list(1000))},
            headers=alice,
        )
        _assert_too_deep(response)


def test_moderate_nesting_still_works(live: Live, alice: dict[str, str]) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        parameters = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
        body = {
            "name": "shallow",
            "type": "http",
            "config": {"url": "https://example.com", "parameters": parameters},
        }
        assert http.post("/api/tools", json=body, headers=alice).status_code == 200


def test_validation_errors_truncate_their_input(live: Live, alice: dict[str, str]) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as http:
        huge = "x" * 200_000
        response = http.post("/api/tools", json={"name": huge, "type": "http", "config": {}}, headers=alice)
        assert response.status_code == 422
        assert len(response.content) < 5000, len(response.content)
        items = response.json()["detail"]
        shown = next(i for i in items if i["loc"] == ["body", "name"])["input"]
        assert isinstance(shown, str) and len(shown) < 300 and shown.startswith("xxx")

        wide = {f"k{i}": i for i in range(10_000)}
        response = http.post("/api/tools", json=wide, headers=alice)
        assert response.status_code == 422
        assert len(response.content) < 20_000, len(response.content)
