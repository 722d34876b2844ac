"""Tool arguments can never change the host, path or query of the URL a tool calls (docs/tools.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import SecretStr

from parley.config import Settings
from parley.tools.executor import _run_http
from parley.tools.models import Tool
from parley.tools.schemas import MAX_TIMEOUT_SECONDS, HttpToolConfig
from tests.live import serve_in_thread
from tests.tools.test_router import http_tool, make_tool, run


async def _recorder(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A bare ASGI app answering every request with what it received (no routing to get in the way)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    body = orjson.dumps(
        {
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "host": headers["host"],
        }
    )
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def recorder_url() -> Iterator[str]:
    with serve_in_thread(_recorder) as url:
        yield url


ATTACKS = [
    "../../admin?secret=1#",
    "..%2F..%2Fadmin",
    "@evil.example/x",
    "x/../../y",
    "..",
    ".",
    "a b&c=d;e",
    "\u00e4/\u2603?#",
    "//evil.example",
]


async def test_args_in_the_path_cannot_change_path_or_query(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    body = http_tool(f"{stub_url}/echo/orders/{{{{ args.p }}}}?fixed=1")
    body["config"]["parameters"] = {"type": "object", "properties": {"p": {"type": "string"}}}
    body["config"]["query"] = {}
    tool = await make_tool(allow_client, headers, body)
    for attack in ATTACKS:
        report = (await run(allow_client, headers, tool["id"], p=attack)).json()
        assert report["status"] == "ok", report
        echoed = report["result"]
        # The upstream saw one path segment holding exactly the argument, and only the fixed query.
        assert echoed["raw_path"].startswith("/echo/orders/")
        segment = echoed["raw_path"][len("/echo/orders/") :]
        assert "/" not in segment
        assert unquote(segment) == attack
        assert echoed["query"] == {"fixed": "1"}
        assert echoed["headers"]["host"] == stub_url.split("//", 1)[1]


@hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=st.text(min_size=1, max_size=40), query=st.text(max_size=40))
def test_any_argument_stays_inside_its_url_component(
    settings: Settings, recorder_url: str, path: str, query: str
) -> None:
    config = HttpToolConfig.model_validate(
        {
            "method": "GET",
            "url": f"{recorder_url}/echo/p/{{{{ args.path }}}}?q={{{{ args.query }}}}",
            "parameters": {"type": "object", "properties": {}},
            # The longest a tool may wait, not the 10 s default: the upstream is a thread of this test
            # process, so anything that stops the process stops it too. In a test worker late in the
            # suite a full garbage collection takes over a second (1.5 million objects) and on a loaded
            # machine the process gets a small share of a core; one of 120 calls once took over 10 s.
            # What this test checks is the URL, not how fast a tool answers (test_router.py does that).
            "timeout_seconds": MAX_TIMEOUT_SECONDS,
        }
    )
    tool = Tool(id="tool_prop", organization_id="org_prop", name="prop", type="http", config={}, secrets={})
    allowed = settings.model_copy(
        update={"outbound_allowlist": ["127.0.0.1"], "secret_key": SecretStr("k" * 43)}
    )
    arguments: dict[str, Any] = {"path": path, "query": query}
    result = asyncio.run(_run_http(allowed, tool, config, arguments))
    assert result.status == "ok", (result.error, path, query)
    echoed = result.result
    assert echoed["host"] == urlsplit(recorder_url).netloc
    segment = echoed["raw_path"][len("/echo/p/") :]
    assert echoed["raw_path"].startswith("/echo/p/") and "/" not in segment
    assert unquote(segment) == path
    # The query string holds one parameter, q, whose value is exactly the argument.
    assert parse_qs(echoed["query"], keep_blank_values=True) == {"q": [query]}
