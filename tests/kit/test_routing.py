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
from parley.kit.routing import (
    ParleyRouter,
    RouteIndex,
    UnitOfWorkRoute,
    check_route_classes,
    install_route_index,
)


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


def _indexed(app: FastAPI) -> FastAPI:
    install_route_index(app)
    assert isinstance(app.router.middleware_stack, RouteIndex)
    return app


def _routers_with_every_kind_of_route() -> FastAPI:
    """Routes the index must keep FastAPI's answers for: prefixed routers, a router without a prefix,
    a route whose first segment is a parameter (listed before routers it would shadow), a mount,
    overlapping prefixes and a nested inclusion."""
    app = FastAPI()
    bare = ParleyRouter()  # no prefix: its keys come from its routes

    @bare.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"ok": "yes"}

    things = ParleyRouter(prefix="/api/things")

    @things.get("/{thing_id}")
    async def get_thing(thing_id: str) -> dict[str, str]:
        return {"got": thing_id}

    @things.get("")
    async def list_things() -> list[str]:
        return ["a"]

    shadow = ParleyRouter()

    @shadow.get("/{page}/things/{thing_id}")
    async def shadowing(page: str, thing_id: str) -> dict[str, str]:
        return {"shadow": f"{page}/{thing_id}"}

    parent = ParleyRouter(prefix="/api/nest")
    child = ParleyRouter(prefix="/inner")

    @child.put("/{x}")
    async def nested(x: str) -> dict[str, str]:
        return {"nested": x}

    parent.include_router(child)
    app.include_router(bare)
    app.include_router(shadow)  # listed before the things router: it wins for /api/things/<id>
    app.include_router(things)
    app.include_router(parent)
    app.mount("/files", FastAPI())
    return app


PROBES = [
    ("GET", "/healthz"),
    ("GET", "/healthz/"),
    ("GET", "/api/things"),
    ("POST", "/api/things"),  # 405 from a router of plain routes
    ("GET", "/api/things/"),  # FastAPI redirects to the route without the slash
    ("GET", "/api/things/a1"),  # the shadowing route, listed earlier, matches first
    ("DELETE", "/api/things/a1"),
    ("GET", "/x/things/a1"),
    ("PUT", "/api/nest/inner/7"),
    ("GET", "/api/nest/inner/7"),  # 405
    ("GET", "/api/nest"),
    ("GET", "/files/x"),
    ("GET", "/files"),
    ("GET", "/"),
    ("GET", "/nowhere/at/all"),
]


async def _answers(app: FastAPI) -> list[tuple[int, bytes, str | None]]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return [
            ((r := await client.request(method, path)).status_code, r.content, r.headers.get("location"))
            for method, path in PROBES
        ]


async def test_the_route_index_answers_every_request_as_fastapi_does() -> None:
    plain = await _answers(_routers_with_every_kind_of_route())
    assert plain[5] == (200, b'{"shadow":"api/a1"}', None)  # the probes reach what they mean to
    assert plain[3][0] == 405 and plain[4][0] == 307 and plain[9][0] == 405 and plain[-1][0] == 404
    assert await _answers(_indexed(_routers_with_every_kind_of_route())) == plain


async def test_the_route_index_sees_routes_added_after_it_was_built() -> None:
    app = _indexed(_routers_with_every_kind_of_route())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/late")).status_code == 404  # the index is built

        @app.get("/late")
        async def late() -> dict[str, str]:
            return {"late": "yes"}

        assert (await client.get("/late")).json() == {"late": "yes"}


class _CountingRouter(ParleyRouter):
    asked = 0

    def matches(self, scope: Any) -> Any:
        _CountingRouter.asked += 1
        return super().matches(scope)


async def test_a_request_asks_only_the_routers_its_path_can_reach() -> None:
    asked = []
    for indexed in (False, True):
        app = FastAPI()
        for n in range(30):
            router = _CountingRouter(prefix=f"/api/area{n}")

            @router.get("/{item}")
            async def item(item: str) -> dict[str, str]:
                return {"item": item}

            app.include_router(router)
        if indexed:
            _indexed(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            _CountingRouter.asked = 0
            assert (await client.get("/api/area29/x")).json() == {"item": "x"}
            asked.append(_CountingRouter.asked)
    assert asked == [30, 1]  # FastAPI asks every router listed before the path's; the index only its own
