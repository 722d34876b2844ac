"""Direct request handlers (kit/direct.py) answer exactly as FastAPI's own handler does.

Each request is sent to two apps built from the same endpoints: one whose routes are Parley's
(compiled into direct handlers) and one with FastAPI's plain routes. Status, body and the order in
which dependencies ran must be the same, for valid and invalid input alike.
"""

# No `from __future__ import annotations`: FastAPI must resolve the closures in the signatures.

from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import orjson
import pytest
from fastapi import APIRouter, Cookie, Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute
from pydantic import AliasChoices, BaseModel, Field
from starlette.requests import Request as StarletteRequest

from parley.kit.direct import direct_handler
from parley.kit.routing import ParleyRouter


class Item(BaseModel):
    name: str = Field(min_length=1, max_length=20)
    count: int = Field(default=1, ge=1)


class ItemOut(BaseModel):
    id: int
    name: str
    count: int
    caller: str


def build(router: APIRouter, calls: list[str]) -> FastAPI:
    """The same endpoints on ``router``; ``calls`` records which dependencies ran, in order."""

    async def caller(request: Request) -> str:
        calls.append("caller")
        token = request.headers.get("authorization")
        if token != "Bearer good":
            raise HTTPException(401, "no caller")
        return "alice"

    async def page(limit: Annotated[int, Query(ge=1, le=50)] = 10) -> int:
        calls.append("page")
        return limit

    async def admin(who: Annotated[str, Depends(caller)]) -> str:
        calls.append("admin")
        if who != "alice":
            raise HTTPException(403, "not an admin")
        return who

    Caller = Annotated[str, Depends(caller)]

    @router.get("/items/{item_id}", response_model=ItemOut)
    async def get_item(
        who: Caller, again: Caller, item_id: Annotated[int, Path(ge=1)], limit: Annotated[int, Depends(page)]
    ) -> dict[str, Any]:
        return {"id": item_id, "name": f"n{limit}", "count": 1, "caller": who + again, "extra": "dropped"}

    @router.post("/items", response_model=ItemOut, status_code=201)
    async def create_item(who: Annotated[str, Depends(admin)], item: Item) -> ItemOut:
        return ItemOut(id=7, name=item.name, count=item.count, caller=who)

    @router.get("/plain/{word}", response_class=PlainTextResponse)
    async def plain(word: str, x_tag: Annotated[str | None, Header()] = None) -> str:
        return f"{word}:{x_tag}"

    @router.delete("/items/{item_id}", status_code=204)
    async def delete_item(who: Caller, item_id: int) -> None:
        return None

    async def held() -> AsyncIterator[str]:
        calls.append("held-enter")
        try:
            yield "held"
        finally:
            calls.append("held-exit")

    async def held_for_the_handler() -> AsyncIterator[str]:
        calls.append("function-enter")
        try:
            yield "function"
        finally:
            calls.append("function-exit")

    @router.get("/held")
    async def with_generators(
        value: Annotated[str, Depends(held)],
        inner: Annotated[str, Depends(held_for_the_handler, scope="function")],
        who: Caller,
    ) -> dict[str, str]:
        calls.append("handler")
        return {"value": value, "inner": inner, "who": who}

    @router.get("/broken", response_model=ItemOut)
    async def broken() -> dict[str, Any]:
        return {"id": "not a number"}

    @router.get("/with-response")
    async def with_response(response: Response) -> dict[str, str]:
        response.headers["x-set"] = "yes"
        return {}

    async def traced(x_trace_id: Annotated[str | None, Header()] = None) -> str | None:
        calls.append("traced")
        return x_trace_id

    @router.get("/params/{wordId}")
    async def parameters(
        word: Annotated[str, Path(alias="wordId", max_length=8)],
        trace: Annotated[str | None, Depends(traced)],
        size: Annotated[int, Query(alias="page-size", ge=1)] = 10,
        term: Annotated[str | None, Query(validation_alias=AliasChoices("q", "query"))] = None,
        raw_header: Annotated[str | None, Header(convert_underscores=False)] = None,
        session: Annotated[str | None, Cookie()] = None,
        flag: Annotated[bool, Query()] = False,
        when: Annotated[int, Query(ge=0)] = -1,  # a default that would not validate: it is not validated
    ) -> dict[str, Any]:
        return {
            "word": word,
            "trace": trace,
            "size": size,
            "term": term,
            "raw_header": raw_header,
            "session": session,
            "flag": flag,
            "when": when,
        }

    @router.get("/tags")
    async def with_tags(
        tags: Annotated[list[str], Query()] = [],  # noqa: B006 - a sequence: read by FastAPI's function
        size: Annotated[int, Query(ge=1)] = 1,
    ) -> dict[str, Any]:
        return {"tags": tags, "size": size}

    @router.get("/needs")
    async def needs(
        need: Annotated[int, Query()],
        x_need: Annotated[str, Header()],
        maybe: Annotated[str | None, Query()] = None,
    ) -> dict[str, Any]:
        return {"need": need, "x_need": x_need, "maybe": maybe}

    app = FastAPI()
    app.include_router(router)
    return app


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/t/items/3", {"headers": {"authorization": "Bearer good"}}),
    ("GET", "/t/items/3?limit=50", {"headers": {"authorization": "Bearer good"}}),
    (
        "GET",
        "/t/items/3?limit=99",
        {"headers": {"authorization": "Bearer good"}},
    ),  # 422 (a dependency's query)
    ("GET", "/t/items/0", {"headers": {"authorization": "Bearer good"}}),  # 422 (path)
    ("GET", "/t/items/abc", {"headers": {"authorization": "Bearer bad"}}),  # 401 before 422
    ("GET", "/t/items/3", {}),  # 401
    (
        "POST",
        "/t/items",
        {"headers": {"authorization": "Bearer good"}, "json": {"name": "wheel", "count": 2}},
    ),
    ("POST", "/t/items", {"headers": {"authorization": "Bearer good"}, "json": {"name": ""}}),  # 422 (body)
    ("POST", "/t/items", {"headers": {"authorization": "Bearer good"}, "content": b"{not json"}),
    (
        "POST",
        "/t/items",
        {"headers": {"authorization": "Bearer good", "content-type": "application/json"}, "content": b"{not"},
    ),
    (
        "POST",
        "/t/items",
        {
            "headers": {"authorization": "Bearer good", "content-type": "text/plain"},
            "content": b'{"name": "x"}',
        },
    ),
    ("POST", "/t/items", {"headers": {"authorization": "Bearer good"}}),  # no body: 422
    (
        "POST",
        "/t/items",
        {
            "headers": {"authorization": "Bearer good", "content-type": "application/json"},
            "content": b"[" * 100_000,
        },
    ),  # nested deeper than the parser goes
    ("POST", "/t/items", {"json": {"name": "wheel"}}),  # 401
    ("GET", "/t/plain/hello", {"headers": {"x-tag": "blue"}}),
    ("GET", "/t/plain/hello", {}),
    ("DELETE", "/t/items/5", {"headers": {"authorization": "Bearer good"}}),
    ("GET", "/t/held", {"headers": {"authorization": "Bearer good"}}),
    ("GET", "/t/held", {}),  # 401 after both dependencies with yield were entered: both exit
    ("GET", "/t/with-response", {}),
    ("GET", "/t/broken", {}),  # the response fails its model: the same error, naming the same endpoint
    ("GET", "/t/params/w", {}),
    (
        "GET",
        "/t/params/w?page-size=3&q=a&query=b&flag=yes&when=4",
        {"headers": {"x-trace-id": "t1", "raw_header": "r", "cookie": "session=s1"}},
    ),
    ("GET", "/t/params/w?query=b&size=5", {"headers": {"x_trace_id": "under", "raw-header": "dash"}}),
    ("GET", "/t/params/w?page-size=0", {}),  # 422
    ("GET", "/t/params/w?page-size=x&flag=maybe", {}),  # 422, two errors
    ("GET", "/t/params/toolongword", {}),  # 422 (the aliased path parameter)
    ("GET", "/t/params/w?when=-2", {}),  # 422: a given value is validated
    ("GET", "/t/params/w?page-size=&q=", {"headers": {"cookie": "session="}}),  # empty values
    ("GET", "/t/tags?tags=a&tags=b&size=2", {}),
    ("GET", "/t/tags", {}),
    ("GET", "/t/tags?size=0", {}),
    ("GET", "/t/needs?need=1", {"headers": {"x-need": "yes"}}),
    ("GET", "/t/needs?need=1&maybe=m", {"headers": {"x-need": "yes"}}),
    ("GET", "/t/needs?need=1", {}),  # 422: a required header is missing
    ("GET", "/t/needs", {"headers": {"x-need": "yes"}}),  # 422: a required query parameter is missing
]


async def _answer(app: FastAPI, method: str, url: str, options: dict[str, Any]) -> tuple[Any, ...]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        try:
            response = await client.request(method, url, **options)
        except Exception as exc:  # an error the app raises (a response failing its model)
            return type(exc).__name__, str(exc)
    return response.status_code, response.content, response.headers.get("content-type", "")


@pytest.mark.parametrize(("method", "url", "options"), REQUESTS)
async def test_direct_handlers_answer_as_fastapi_does(method: str, url: str, options: dict[str, Any]) -> None:
    direct_calls: list[str] = []
    general_calls: list[str] = []
    direct_app = build(ParleyRouter(prefix="/t"), direct_calls)
    general_app = build(APIRouter(prefix="/t"), general_calls)

    assert await _answer(direct_app, method, url, options) == await _answer(general_app, method, url, options)
    assert direct_calls == general_calls


def _route(router: APIRouter, path: str, method: str) -> APIRoute:
    return next(
        r for r in router.routes if isinstance(r, APIRoute) and r.path == path and method in r.methods
    )


def _request(
    path_params: dict[str, Any], query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> Any:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/t",
        "query_string": query,
        "headers": headers or [(b"authorization", b"Bearer good")],
        "path_params": path_params,
    }
    return StarletteRequest(scope)


async def test_valid_requests_are_served_without_fastapis_handler_and_invalid_ones_by_it() -> None:
    calls: list[str] = []
    router = APIRouter(prefix="/t")
    build(router, calls)
    handed_over: list[Any] = []

    async def fallback(request: Any) -> Any:
        handed_over.append(request)
        return PlainTextResponse("general")

    handler = direct_handler(_route(router, "/t/items/{item_id}", "GET"), fallback)
    assert handler is not None

    response = await handler(_request({"item_id": "3"}, b"limit=5"))
    assert response.status_code == 200 and handed_over == []
    assert response.body == b'{"id":3,"name":"n5","count":1,"caller":"alicealice"}'
    # One call of a dependency asked for twice (FastAPI's dependency cache), in FastAPI's order.
    assert calls == ["caller", "page"]

    calls.clear()
    response = await handler(_request({"item_id": "3"}, b"limit=500"))
    assert response.body == b"general" and len(handed_over) == 1
    assert calls == []  # handed over before any dependency ran: FastAPI runs them, then answers 422


async def test_routes_needing_fastapis_general_handler_are_not_compiled() -> None:
    router = APIRouter(prefix="/t")
    build(router, [])

    async def fallback(request: Any) -> Any:
        raise AssertionError("not called")

    assert direct_handler(_route(router, "/t/with-response", "GET"), fallback) is None  # a Response parameter


async def test_dependency_overrides_are_honoured() -> None:
    calls: list[str] = []
    router = ParleyRouter(prefix="/t")
    app = build(router, calls)
    route_dependency = _route(router, "/t/items/{item_id}", "GET").dependant.dependencies[0].call

    async def stand_in() -> str:
        return "bob"

    app.dependency_overrides[route_dependency] = stand_in
    status, body, _ = await _answer(app, "GET", "/t/items/3", {})
    assert status == 200 and b'"caller":"bobbob"' in body


async def test_parameters_are_read_as_fastapi_reads_them_without_its_handler() -> None:
    calls: list[str] = []
    router = APIRouter(prefix="/t")
    build(router, calls)

    async def fallback(request: Any) -> Any:
        raise AssertionError("a valid request is served directly")

    handler = direct_handler(_route(router, "/t/params/{wordId}", "GET"), fallback)
    assert handler is not None
    request = _request(
        {"wordId": "w"},
        b"query=b&page-size=3",
        [(b"x-trace-id", b"t"), (b"raw_header", b"r"), (b"cookie", b"session=s")],
    )
    response = await handler(request)
    assert orjson.loads(response.body) == {
        "word": "w",
        "trace": "t",
        "size": 3,
        "term": "b",
        "raw_header": "r",
        "session": "s",
        "flag": False,
        "when": -1,
    }
    response = await handler(_request({"wordId": "w"}, b"", []))
    assert orjson.loads(response.body)["size"] == 10
    response = await direct_handler(_route(router, "/t/tags", "GET"), fallback)(  # type: ignore[misc]
        _request({}, b"tags=a&tags=b")
    )
    assert orjson.loads(response.body) == {"tags": ["a", "b"], "size": 1}
