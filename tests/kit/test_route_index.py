"""The route index (parley.kit.routing.RouteIndex) routes every request as FastAPI's router does.

Each request is sent twice to the same app, raw over ASGI: once through the index, once through the
framework's router alone. Status, headers (but the request id), body and what the routing left in
the scope (the route, endpoint, path parameters, FastAPI's bookkeeping) must be the same.
"""

# No `from __future__ import annotations`: FastAPI must resolve the closures in the signatures.

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, WebSocket
from fastapi.routing import APIRoute
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from parley.app import ROUTERS, create_app
from parley.config import Settings
from parley.kit import routing
from parley.kit.db import Database
from parley.kit.routing import ParleyRouter, RouteIndex, install_route_index
from tests.conftest import JWT_SECRET

ROUTING_KEYS = ("route", "endpoint", "path_params", "router", "fastapi")


async def _send(app: Any, method: str, path: str, root_path: str = "") -> tuple[Any, ...]:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 40000),
        "server": ("test", 80),
        "state": {},
    }
    sent: list[Any] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = sorted((k, v) for k, v in message.get("headers", []) if k != b"x-request-id")
            sent.append((message["status"], headers))
        else:
            sent.append(message.get("body", b""))

    await app(scope, receive, send)
    routed = {key: scope.get(key) for key in ROUTING_KEYS}
    if isinstance(routed["fastapi"], dict):
        routed["fastapi"] = dict(routed["fastapi"])
    return tuple(sent), routed


async def _both(app: Any, method: str, path: str, root_path: str = "") -> tuple[Any, Any]:
    index = app.router.middleware_stack
    assert isinstance(index, RouteIndex)
    indexed = await _send(app, method, path, root_path)
    app.router.middleware_stack = app.router.app
    try:
        plain = await _send(app, method, path, root_path)
    finally:
        app.router.middleware_stack = index
    return indexed, plain


def _synthetic_app(tmp_path: Path, *, nested: bool = False) -> FastAPI:
    app = FastAPI()
    first = ParleyRouter(prefix="/api/things")
    second = ParleyRouter(prefix="/api/things")  # a second router on the same prefix
    other = ParleyRouter(prefix="/api/thing")  # a prefix that is a prefix of the others' prefix
    plain = APIRouter(prefix="/plain")  # FastAPI's own router and route class
    catch_all = ParleyRouter()

    @first.get("/{thing_id}")
    async def get_thing(thing_id: str) -> dict[str, str]:
        return {"got": thing_id}

    @first.get("/{number:int}/double")
    async def double(number: int) -> dict[str, int]:
        return {"double": 2 * number}

    @first.delete("/{thing_id}", status_code=204)
    async def delete_thing(thing_id: str) -> None:
        return None

    @second.get("/export")  # shadowed by /{thing_id} for GET: the first FULL match wins
    async def shadowed() -> dict[str, str]:
        return {"shadowed": "never"}

    @second.post("/export")
    async def export() -> dict[str, str]:
        return {"exported": "yes"}

    @second.get("/")
    async def slash() -> dict[str, str]:
        return {"slash": "yes"}

    @other.get("s-list")
    async def listing() -> dict[str, str]:
        return {"list": "yes"}

    @other.websocket("/socket")
    async def socket(websocket: WebSocket) -> None:
        await websocket.close()

    @plain.get("")
    async def plain_root() -> dict[str, str]:
        return {"plain": "root"}

    @plain.get("/{word}")
    async def plain_word(word: str) -> dict[str, str]:
        return {"word": word}

    @catch_all.get("/{anything:path}")
    async def anything(anything: str) -> dict[str, str]:
        return {"anything": anything}

    async def starlette_endpoint(request: Any) -> PlainTextResponse:
        return PlainTextResponse("starlette")

    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "a.txt").write_text("static")
    app.router.routes.append(Route("/api/things/starlette", starlette_endpoint, methods=["GET"]))
    app.mount("/files", StaticFiles(directory=tmp_path / "static"))
    for router in (first, second, other, plain):
        app.include_router(router)
    if nested:  # an included router in an included router: the index leaves all that follows to FastAPI
        nested_parent = ParleyRouter(prefix="/api/nest")
        nested_child = ParleyRouter(prefix="/inner")

        @nested_child.get("/{x}")
        async def nested_route(x: str) -> dict[str, str]:
            return {"nested": x}

        nested_parent.include_router(nested_child)
        app.include_router(nested_parent)
    app.include_router(catch_all)
    install_route_index(app)
    return app


SYNTHETIC = [
    ("GET", "/api/things/a1"),
    ("GET", "/api/things/a1/"),  # no route: the trailing-slash redirect... to the catch-all
    ("DELETE", "/api/things/a1"),
    ("PUT", "/api/things/a1"),  # 405 with Allow
    ("HEAD", "/api/things/a1"),  # GET routes do not answer HEAD in FastAPI: 405
    ("GET", "/api/things/12/double"),
    ("GET", "/api/things/x12/double"),  # the int convertor does not match: the catch-all does
    ("GET", "/api/things/export"),
    ("POST", "/api/things/export"),
    ("GET", "/api/things/"),
    ("GET", "/api/things"),
    ("GET", "/api/things-list"),
    ("POST", "/api/things-list"),
    ("GET", "/api/thing/socket"),  # a websocket route never matches HTTP
    ("GET", "/api/things/starlette"),  # a Starlette route before the routers: the framework's
    ("HEAD", "/api/things/starlette"),
    ("GET", "/files/a.txt"),
    ("GET", "/files/missing.txt"),
    ("GET", "/files"),
    ("GET", "/plain/hello"),
    ("POST", "/plain/hello"),
    ("GET", "/plain/hello/"),
    ("GET", "/api/things/a1\n"),  # "$" matches before a final newline
    ("GET", "/plain\n"),
    ("GET", "/plain"),
    ("GET", "/"),
    ("GET", ""),
    ("GET", "/api"),
    ("GET", "/api/"),
    ("GET", "//api/things/a1"),
    ("OPTIONS", "/api/things/a1"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("HEAD", "/openapi.json"),
    ("GET", "/docs/oauth2-redirect"),
]


@pytest.mark.parametrize(("method", "path"), SYNTHETIC)
async def test_the_index_routes_as_the_framework_does(tmp_path: Path, method: str, path: str) -> None:
    app = _synthetic_app(tmp_path)
    indexed, plain = await _both(app, method, path)
    assert indexed == plain


async def test_a_nested_included_router_is_routed_by_the_framework(tmp_path: Path) -> None:
    app = _synthetic_app(tmp_path, nested=True)
    for method, path in [*SYNTHETIC, ("GET", "/api/nest/inner/x"), ("GET", "/api/nest/inner/x/")]:
        indexed, plain = await _both(app, method, path)
        assert indexed == plain, (method, path)
    assert (await _send(app, "GET", "/api/nest/inner/x"))[0][1] == b'{"nested":"x"}'


async def test_root_path_and_routes_added_after_the_first_request(tmp_path: Path) -> None:
    app = _synthetic_app(tmp_path)
    indexed, plain = await _both(app, "GET", "/prefix/api/things/a1", root_path="/prefix")
    assert indexed == plain
    assert indexed[0][1] == b'{"got":"a1"}'
    late = ParleyRouter(prefix="/api/late")

    @late.get("/{x}")
    async def late_route(x: str) -> dict[str, str]:
        return {"late": x}

    app.include_router(late)  # after the catch-all: the catch-all still wins
    indexed, plain = await _both(app, "GET", "/api/late/1")
    assert indexed == plain
    assert indexed[0][1] == b'{"anything":"api/late/1"}'

    @late.get("/{x}/more")
    async def later(x: str) -> dict[str, str]:
        return {"later": x}

    app.router.routes.insert(0, app.router.routes.pop())  # moved before everything: now it wins
    for path in ("/api/late/1", "/api/late/1/more"):
        indexed, plain = await _both(app, "GET", path)
        assert indexed == plain
    assert indexed[0][1] == b'{"later":"1"}'


async def test_a_full_match_is_served_without_the_framework_router(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _synthetic_app(tmp_path)
    index = app.router.middleware_stack
    assert isinstance(index, RouteIndex)
    framework_calls: list[str] = []
    framework = index.framework

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        framework_calls.append(scope["path"])
        await framework(scope, receive, send)

    monkeypatch.setattr(index, "framework", counted)
    await _send(app, "GET", "/api/things/a1")
    await _send(app, "GET", "/plain/word")
    assert framework_calls == []
    await _send(app, "PUT", "/api/things/a1")  # a partial match: the framework answers 405
    await _send(app, "GET", "/api/things/starlette")
    assert framework_calls == ["/api/things/a1", "/api/things/starlette"]


async def test_websockets_and_lifespan_go_to_the_framework(tmp_path: Path) -> None:
    app = _synthetic_app(tmp_path)
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/api/thing/socket", "headers": [], "query_string": b""}
    await app(scope, receive, send)
    assert sent[0]["type"] == "websocket.close"
    assert scope["route"].path == "/api/thing/socket"


def test_the_index_is_not_installed_without_fastapis_bookkeeping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routing, "_INDEXABLE", False)
    app = FastAPI()
    install_route_index(app)
    assert app.router.middleware_stack == app.router.app


def _sample(path_format: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path_format)


@pytest.fixture
def parley_app(tmp_path: Path, database: Database, db_url: str) -> Any:
    if not db_url.startswith("sqlite"):
        pytest.skip("routing does not depend on the database")
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        log_json=False,
        rate_limit_per_minute=0,
        rate_limit_org_per_minute=0,
        rate_limit_address_per_minute=0,
    )
    return create_app(settings, database=database)


async def test_every_route_of_the_platform_is_routed_as_the_framework_routes_it(parley_app: Any) -> None:
    paths = {"/", "/api", "/api/", "/nowhere", "/docs", "/openapi.json", "/docs-assets/swagger-ui.css"}
    for route in parley_app.routes:
        path_format = getattr(route, "path_format", None)
        if path_format:
            paths.add(_sample(path_format))
    for candidate in parley_app.openapi()["paths"]:
        sample = _sample(candidate)
        paths.update({sample, sample + "/", sample.rstrip("1")})
    for path in sorted(paths):
        for method in ("GET", "POST", "DELETE", "HEAD"):
            indexed, plain = await _both(parley_app, method, path)
            if path == "/metrics" and method == "GET":  # the counts change between the two requests
                indexed, plain = (indexed[0][0][0], indexed[1]), (plain[0][0][0], plain[1])
            assert indexed == plain, (method, path)


def test_the_platform_serves_every_api_route_through_the_index(parley_app: Any) -> None:
    leaves = list(routing._leaves(parley_app.router))
    served = {id(leaf.route) for leaf in leaves if leaf.context is not None}
    api_routes = {id(route) for router in ROUTERS for route in router.routes if isinstance(route, APIRoute)}
    assert served == api_routes
    # Only the app's own routes (the OpenAPI document, the docs and their assets) are the framework's.
    assert sorted(leaf.literal for leaf in leaves if leaf.context is None) == [
        "/docs",
        "/docs-assets/",
        "/docs/oauth2-redirect",
        "/openapi.json",
    ]
