"""The shared body parser, through a small app that uses it like every route does."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

from parley.kit.body import ParsedBody
from parley.kit.errors import install_error_handlers


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tags: list[str] = []
    count: int = 0
    enabled: bool = False
    meta: dict[str, int] = {}
    note: str | None = None


def make_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/echo")
    async def echo(body: Annotated[Payload, ParsedBody(Payload)]) -> Payload:
        return body

    return app


@pytest.fixture
async def echo_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app()), base_url="http://t")


EXPECTED = {"name": "A", "tags": ["x", "y"], "count": 3, "enabled": True, "meta": {"a": 1}, "note": "123"}


async def test_json(echo_client: httpx.AsyncClient) -> None:
    response = await echo_client.post("/echo", json=EXPECTED)
    assert response.json() == EXPECTED


async def test_text_plain_is_json_text(echo_client: httpx.AsyncClient) -> None:
    import json

    response = await echo_client.post(
        "/echo", content=json.dumps(EXPECTED), headers={"Content-Type": "text/plain"}
    )
    assert response.json() == EXPECTED


async def test_multipart_repeated_fields(echo_client: httpx.AsyncClient) -> None:
    files = [
        ("name", (None, "A")),
        ("tags", (None, "x")),
        ("tags", (None, "y")),
        ("count", (None, "3")),
        ("enabled", (None, "true")),
        ("meta", (None, '{"a": 1}')),
        ("note", (None, "123")),
    ]
    response = await echo_client.post("/echo", files=files)
    assert response.status_code == 200, response.text
    assert response.json() == EXPECTED


async def test_multipart_list_as_json_string(echo_client: httpx.AsyncClient) -> None:
    response = await echo_client.post("/echo", files={"name": (None, "A"), "tags": (None, '["x", "y"]')})
    assert response.json()["tags"] == ["x", "y"]


async def test_urlencoded_form(echo_client: httpx.AsyncClient) -> None:
    response = await echo_client.post("/echo", data={"name": "A", "count": "2"})
    assert response.json()["count"] == 2


async def test_errors_look_like_fastapis(echo_client: httpx.AsyncClient) -> None:
    response = await echo_client.post("/echo", json={"count": "many"})
    assert response.status_code == 422
    locs = sorted(tuple(e["loc"]) for e in response.json()["detail"])
    assert locs == [("body", "count"), ("body", "name")]
    broken = await echo_client.post("/echo", content=b"{nope", headers={"Content-Type": "application/json"})
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"
    empty_text = await echo_client.post("/echo", content=b"", headers={"Content-Type": "text/plain"})
    assert empty_text.status_code == 422 and empty_text.json()["detail"][0]["type"] == "missing"
    wrong_type = await echo_client.post("/echo", content=b"a,b", headers={"Content-Type": "text/csv"})
    assert wrong_type.status_code == 415 and wrong_type.json()["code"] == "unsupported_media_type"


async def test_a_client_that_leaves_mid_body_gets_a_400_not_a_server_error() -> None:
    """Half a body, then the connection drops: a quiet 400 (nothing applied), never a logged 500."""
    app = make_app()
    messages: Iterator[dict[str, Any]] = iter(
        [
            {"type": "http.request", "body": b'{"name": "hal', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/echo",
        "raw_path": b"/echo",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"40")],
        "client": ("127.0.0.1", 5000),
        "server": ("t", 80),
    }
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 400
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert b"closed the connection" in body
