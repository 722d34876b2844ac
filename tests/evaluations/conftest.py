"""Evaluations fixtures: an organization with the order_lookup tool on the real order connector, the
demo order-status flow, and the app's job queue in drain mode (tests share one database connection,
so jobs run when the test drains the queue, never beside a request)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from parley.demo.flows import order_status_flow
from parley.demo.suite import demo_scenarios
from parley.kit.db import Database
from parley.kit.jobs import JobContext, JobRunner
from tests.conftest import auth
from tests.live import serve_in_thread
from tests.organizations.test_router import ALICE, create_org
from tests.stubs.openai import StubState, make_openai_stub


@dataclass
class Lab:
    app: Any
    client: httpx.AsyncClient
    headers: dict[str, str]
    org: str

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers, **kwargs)

    async def put(self, path: str, body: Any = None) -> httpx.Response:
        return await self.client.put(path, json=body, headers=self.headers)

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.headers, **kwargs)

    async def ok(self, response: httpx.Response) -> Any:
        assert response.status_code == 200, response.text
        return response.json()

    async def flow(
        self, definition: dict[str, Any], *, name: str = "Auftragsstatus", publish: bool = False
    ) -> str:
        flow = await self.ok(await self.post("/api/flows", {"name": name, "definition": definition}))
        if publish:
            await self.ok(await self.post(f"/api/flows/{flow['id']}/publish"))
        return str(flow["id"])

    async def suite(
        self,
        scenarios: list[dict[str, Any]],
        *,
        flow_id: str | None = None,
        name: str = "Regression",
        **extra: Any,
    ) -> str:
        dataset = await self.ok(await self.post("/api/datasets", {"name": name}))
        await self.ok(
            await self.put(f"/api/evaluations/suites/{dataset['id']}", {"flow_id": flow_id, **extra})
        )
        if scenarios:
            await self.ok(
                await self.post(
                    f"/api/datasets/{dataset['id']}/items", {"items": [{"data": s} for s in scenarios]}
                )
            )
        return str(dataset["id"])

    async def drain(self) -> None:
        await self.app.state.jobs.drain(120)

    async def run(self, suite: str, flow_id: str, **body: Any) -> dict[str, Any]:
        """Start a run, let its jobs work, answer the finished run."""
        run = await self.ok(
            await self.post("/api/evaluations/runs", {"suite": suite, "flow_id": flow_id, **body})
        )
        await self.drain()
        return dict(await self.ok(await self.get(f"/api/evaluations/runs/{run['id']}")))

    async def results(self, run_id: str, **params: Any) -> list[dict[str, Any]]:
        page = await self.ok(
            await self.get(f"/api/evaluations/runs/{run_id}/results", params={"limit": 200, **params})
        )
        return list(page["items"])


@pytest.fixture(scope="session")
def llm_stub() -> Iterator[tuple[str, StubState]]:
    state = StubState()
    with serve_in_thread(make_openai_stub(state)) as url:
        yield url, state


@pytest.fixture
async def lab(settings: Settings, database: Database, connector: dict[str, str]) -> AsyncIterator[Lab]:
    app = create_app(
        settings.model_copy(update={"outbound_allowlist": ["127.0.0.1"], "connector_url": connector["url"]}),
        database=database,
    )
    app.state.jobs = JobRunner(JobContext(db=database, state=app.state), workers=0)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://parley.test")
    org = str((await create_org(client))["id"])
    lab = Lab(app, client, auth(ALICE, org), org)
    tool = await lab.post(
        "/api/tools",
        {"name": "order_lookup", "type": "order_lookup", "secrets": {"api_key": connector["key"]}},
    )
    assert tool.status_code == 200, tool.text
    yield lab
    await client.aclose()


@pytest.fixture
def demo() -> list[dict[str, Any]]:
    return demo_scenarios()


__all__ = ["Lab", "order_status_flow"]
