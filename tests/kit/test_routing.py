"""Parley's router and route classes (parley.kit.routing): the unit of work ends with the handler, and
a router skips paths outside its prefix without changing what any request answers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker

from parley.kit.db import DbSession, RequestUnit, create_engine
from parley.kit.routing import ParleyRouter, UnitOfWorkRoute, check_route_classes


def test_an_api_route_of_another_class_is_refused_at_start_up() -> None:
    plain = APIRouter(prefix="/api/plain")

    @plain.get("/x")
    async def handler() -> dict[str, str]:
        return {}

    with pytest.raises(RuntimeError, match=r"route_class=UnitOfWorkRoute: \['GET'\] /api/plain/x"):
        check_route_classes(plain.routes)
    parley = ParleyRouter(prefix="/api/ok")
    parley.get("/x")(handler)
    assert all(isinstance(route, UnitOfWorkRoute) for route in parley.routes)
    check_route_classes(parley.routes)


def _app(*routers: APIRouter) -> FastAPI:
    app = FastAPI()
    for router in routers:
        app.include_router(router)
    return app


async def test_prefix_skipping_keeps_every_answer_405_404_and_overlapping_routers() -> None:
    first = ParleyRouter(prefix="/api/things")
    second = ParleyRouter(prefix="/api/things")  # a second router on the same prefix (as calls has)
    other = ParleyRouter(prefix="/api/thing")  # a prefix that is a prefix of the others' prefix

    @first.get("/{thing_id}")
    async def get_thing(thing_id: str) -> dict[str, str]:
        return {"got": thing_id}

    @second.post("/export")
    async def export() -> dict[str, str]:
        return {"exported": "yes"}

    @other.get("s-list")
    async def listing() -> dict[str, str]:
        return {"list": "yes"}

    app = _app(first, second, other)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/api/things/a1")).json() == {"got": "a1"}
        assert (await client.post("/api/things/export")).json() == {"exported": "yes"}
        assert (await client.get("/api/things-list")).json() == {"list": "yes"}
        assert (await client.delete("/api/things/a1")).status_code == 405  # a partial match, still found
        assert (await client.get("/api/nothing/a1")).status_code == 404
        assert (await client.get("/elsewhere")).status_code == 404


class _Database:
    """The unit of work's view of a database: session factories over one SQLite engine."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)
        self.write_sessionmaker = self.sessionmaker


async def test_the_unit_commits_before_the_response_and_rolls_back_a_failed_handler(tmp_path: Any) -> None:
    database = _Database(f"sqlite+aiosqlite:///{tmp_path / 'unit.db'}")
    async with database.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (v TEXT)"))
    router = ParleyRouter(prefix="/api/t")
    units: list[RequestUnit] = []

    @router.post("/{value}")
    async def write(request: Request, session: DbSession, value: str) -> dict[str, str]:
        units.append(RequestUnit.of(request))
        await session.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": value})
        if value == "fail":
            raise ValueError("the handler failed after writing")
        return {"wrote": value}

    app = _app(router)
    app.state.db = database
    app.state.jobs = None
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.post("/api/t/kept")).status_code == 200
            assert units[-1].done  # ended before the response went out
            assert (await client.post("/api/t/fail")).status_code == 500
            assert units[-1].done
        async with database.engine.connect() as conn:
            assert [row[0] for row in await conn.execute(text("SELECT v FROM t"))] == ["kept"]
    finally:
        await database.engine.dispose()


async def test_prefix_skipping_counts_the_prefix_of_the_inclusion() -> None:
    """A router included with a prefix (by a parent router, or include_router's prefix=) serves its
    routes under both prefixes, as FastAPI's own router does."""
    answers = []
    for router_class in (APIRouter, ParleyRouter):
        parent = router_class(prefix="/api/nest")
        child = router_class(prefix="/inner")
        versioned = router_class(prefix="/things")

        @child.get("/{x}")
        async def nested(x: str) -> dict[str, str]:
            return {"nested": x}

        @versioned.get("/{x}")
        async def thing(x: str) -> dict[str, str]:
            return {"thing": x}

        parent.include_router(child)
        app = FastAPI()
        app.include_router(parent)
        app.include_router(versioned, prefix="/v2")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers.append(
                [
                    ((response := await client.get(path)).status_code, response.content)
                    for path in ("/api/nest/inner/x", "/inner/x", "/v2/things/1", "/things/1", "/v2/things")
                ]
            )
    assert answers[0][0] == (200, b'{"nested":"x"}')
    assert answers[0][2] == (200, b'{"thing":"1"}')
    assert answers[1] == answers[0]
