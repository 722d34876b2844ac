"""A hostile template rendered at run time is refused within its budget, while /healthz and another
organization's requests are answered (issue 18, item 2), against a real server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.live import serve_in_thread
from tests.security.conftest import Live, new_org

CUBIC = "{% for a in args.s %}{% for b in args.s %}{% for c in args.s %}x{% endfor %}{% endfor %}{% endfor %}"


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse({"path": request.url.path})


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with serve_in_thread(Starlette(routes=[Route("/{rest:path}", _echo)])) as url:
        yield url


async def test_a_hostile_render_is_refused_while_others_are_answered(live: Live, upstream: str) -> None:
    with httpx.Client(base_url=live.url, timeout=60) as http:
        alice = new_org(http, "tpl-alice", "Alice GmbH")
        bob = new_org(http, "tpl-bob", "Bob KG")
        # Only the arguments make this template expensive, so it passes the check when saved.
        tool = http.post(
            "/api/tools",
            json={
                "name": "cubic",
                "type": "http",
                "config": {
                    "method": "GET",
                    "url": f"{upstream}/t/{CUBIC}",
                    "parameters": {"type": "object", "properties": {"s": {"type": "string"}}},
                },
            },
            headers=alice,
        )
        assert tool.status_code == 200, tool.text
        tool_id = tool.json()["id"]

    async with httpx.AsyncClient(base_url=live.url, timeout=60) as client:
        hostile = [
            client.post(f"/api/tools/{tool_id}/test", json={"arguments": {"s": "y" * 300}}, headers=alice)
            for _ in range(4)
        ]
        answers = await asyncio.gather(
            *hostile, client.get("/healthz"), client.get("/api/tools", headers=bob)
        )
        for report in answers[:4]:
            assert report.status_code == 200, report.text
            body = report.json()
            assert body["status"] == "error"
            assert "budget" in body["error"] or "loop iterations" in body["error"], body
        assert answers[4].status_code == 200
        assert answers[5].status_code == 200 and answers[5].json()["items"] == []
        small = await client.post(
            f"/api/tools/{tool_id}/test", json={"arguments": {"s": "ab"}}, headers=alice
        )
        assert small.json()["status"] == "ok", small.text
        assert json.loads(json.dumps(small.json()["result"]))["path"] == "/t/" + "x" * 8
