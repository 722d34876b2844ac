"""Parley's router and route classes, and the index the app routes its requests by.

- :class:`UnitOfWorkRoute` ends the request's unit of work with the handler. A dependency with
  ``yield`` would do the same, but FastAPI pays for one on every request (an exit stack, a cancel
  scope, a context manager); ending the unit here costs one call, and nothing when the request opened
  no unit. The app refuses to start with an API route of another class (:func:`check_route_classes`).
  Its handler is a direct one (:mod:`parley.kit.direct`) wherever the route allows: FastAPI's work
  without its general machinery.
- :class:`ParleyRouter` (every domain's ``router``) uses that route class and answers "no match" at
  once for a path outside its prefix, for the requests FastAPI's router routes itself.
- :class:`RouteIndex` (:func:`install_route_index`) is where the app's router starts an HTTP request.
  FastAPI 0.165 matches an included router by trying each of its routes in turn, with scope
  bookkeeping per route tried, and tries them all again to handle the match; with 36 routers that was
  a tenth of a simple GET. The index finds the request's API route among the few whose path begins
  as the request's does, in the router's order, with FastAPI's own ``matches``, and serves a FULL match
  as FastAPI does; every other request (405, redirects, 404, websockets, the docs) goes to FastAPI's
  router untouched. ``tests/kit/test_route_index.py`` compares both on every route of the platform."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, NamedTuple

from fastapi import Request, Response
from fastapi.routing import APIRoute, APIRouter, APIWebSocketRoute
from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match, WebSocketRoute
from starlette.types import Receive, Scope, Send

from parley.kit.db import end_request_unit
from parley.kit.direct import direct_handler

try:  # FastAPI 0.165's included-router bookkeeping; without it, FastAPI routes every
    # request (no prefix skipping, no index)
    from fastapi.routing import (
        _FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY,
        _FASTAPI_INCLUDED_ROUTER_KEY,
        _FASTAPI_SCOPE_KEY,
        _EffectiveRouteContext,
        _IncludedRouter,
    )
except ImportError:  # pragma: no cover - another FastAPI version
    _INDEXABLE = False
else:
    _INDEXABLE = True


class UnitOfWorkRoute(APIRoute):
    """Commits the request's unit of work when the handler returns, before the response is sent (a
    failed commit is an error response, never a silent loss); rolls it back when the handler fails."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        general = super().get_route_handler()
        handler = direct_handler(self, general) or general

        async def handle_in_unit(request: Request) -> Response:
            try:
                response = await handler(request)
            except BaseException:
                await end_request_unit(request, failed=True)
                raise
            await end_request_unit(request, failed=False)
            return response

        return handle_in_unit


def check_route_classes(routes: Iterable[BaseRoute]) -> None:
    """Refuse an API route that would never end its unit of work (a router without the route class)."""
    strays = [
        f"{sorted(route.methods or ())} {route.path}"
        for route in routes
        if isinstance(route, APIRoute) and not isinstance(route, UnitOfWorkRoute)
    ]
    if strays:
        raise RuntimeError(
            "These routes do not end their unit of work; give their APIRouter "
            f"route_class=UnitOfWorkRoute: {', '.join(strays)}"
        )


class ParleyRouter(APIRouter):
    """An ``APIRouter`` whose routes end their unit of work and that skips paths outside its prefix."""

    def __init__(self, *, prefix: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("route_class", UnitOfWorkRoute)
        super().__init__(prefix=prefix, **kwargs)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # Every route of this router starts with the prefix of its inclusion (a parent router's, or
        # include_router's prefix=) and its own: FastAPI prepends both to each, so no route can match
        # (not even partly, for a 405) a path that does not. FastAPI names the inclusion in the scope.
        if self.prefix and _INDEXABLE:
            included = scope.get(_FASTAPI_SCOPE_KEY, {}).get(_FASTAPI_INCLUDED_ROUTER_KEY)
            if type(included) is _IncludedRouter and included.original_router is self:
                prefix = included.include_context.prefix + self.prefix
                if not get_route_path(scope).startswith(prefix):
                    return Match.NONE, {}
        return super().matches(scope)


# --- The route index -------------------------------------------------------------------------------

_HTTP_ONLY_NONE = (WebSocketRoute.matches, APIWebSocketRoute.matches)  # never match an HTTP request


def _key(path: str) -> str:
    """A path's first two segments (``/api/api-keys`` of ``/api/api-keys/key_1/revoke``), or all of it."""
    first = path.find("/", 1)
    if first < 0:
        return path
    second = path.find("/", first + 1)
    return path if second < 0 else path[:second]


def _literal(path_format: Any) -> str:
    """What every path a route matches starts with: its path up to the first parameter ("" if unknown)."""
    if not isinstance(path_format, str) or not path_format.startswith("/"):
        return ""
    return path_format.partition("{")[0]


class _Leaf(NamedTuple):
    """One route as the router tries it. ``context`` is None for a route the index does not serve
    itself: when its literal prefix fits the path, the framework routes the request."""

    literal: str
    keyed: bool  # the literal holds the path's first two segments (or is the whole path)
    context: Any  # the _EffectiveRouteContext of an APIRoute in an included router
    included: Any  # its _IncludedRouter
    route: Any  # its APIRoute


def _opaque(route: Any) -> _Leaf:
    return _Leaf(_literal(getattr(route, "path_format", None)), False, None, None, None)


def _leaves(router: APIRouter) -> Iterator[_Leaf]:
    """Every route ``router`` tries for an HTTP request, in its order, included routers' routes in place."""
    for route in router.routes:
        if type(route).matches in _HTTP_ONLY_NONE:
            continue
        if not (
            type(route) is _IncludedRouter
            and type(route.original_router).handle is APIRouter.handle
            and type(route.original_router).matches in (APIRouter.matches, ParleyRouter.matches)
            and not route.include_context.form_limits
        ):
            yield _opaque(route)
            continue
        for candidate in route.effective_candidates():
            if type(candidate) is not _EffectiveRouteContext:
                yield _Leaf("", False, None, None, None)  # a nested included router: the framework's
                continue
            original = candidate.original_route
            if isinstance(original, APIRoute) and type(original).matches is APIRoute.matches:
                literal = _literal(candidate.path_format)
                keyed = bool(literal) and (literal == candidate.path_format or literal.count("/") >= 3)
                yield _Leaf(literal, keyed, candidate, route, original)
                continue
            effective = candidate.starlette_route or original
            if type(effective).matches in _HTTP_ONLY_NONE:
                continue
            yield _opaque(effective)


class RouteIndex:
    """The app router's entry point (``Router.middleware_stack``): routes an HTTP request to its API
    route through an index of the routes by their paths' first two segments, the framework everything
    else.

    The router tries its routes in order and the first FULL match wins; FastAPI tries an included
    router's routes once to find it and again to handle it, with scope bookkeeping per route tried.
    The index tries only the routes whose literal prefix (the path up to the first parameter) fits the
    path, in the router's order, each with FastAPI's own ``matches``; a route it cannot rule out
    otherwise stays in every bucket. The first FULL match is served exactly as FastAPI serves it
    (``_IncludedRouter._handle_selected``: the same scope, then the route's ``handle``). Anything else
    goes to the framework's router untouched: a PARTIAL match (405 with ``Allow``), no match (the
    trailing-slash redirect, 404), a route the index does not serve itself (a mount, a Starlette route,
    the docs, a nested included router, a router or route class with its own matching) whose literal
    prefix fits the path, websockets, lifespan, and requests under FastAPI's native telemetry.

    The index is rebuilt when the number of routes of the router or of an included router changes
    (routes added after the first request).
    """

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.framework = router.app
        self._sizes: tuple[int, ...] = ()
        self._lists: tuple[list[BaseRoute], ...] = ()
        self._buckets: dict[str, tuple[_Leaf, ...]] = {}
        self._unkeyed: tuple[_Leaf, ...] = ()

    def _build(self) -> None:
        leaves = list(_leaves(self.router))
        keys = {_key(leaf.literal) for leaf in leaves if leaf.keyed}
        self._buckets = {
            key: tuple(leaf for leaf in leaves if not leaf.keyed or _key(leaf.literal) == key) for key in keys
        }
        self._unkeyed = tuple(leaf for leaf in leaves if not leaf.keyed)
        lists = [self.router.routes]
        lists.extend(
            route.original_router.routes for route in self.router.routes if type(route) is _IncludedRouter
        )
        self._lists = tuple(lists)
        self._sizes = tuple(map(len, self._lists))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "fastapi.telemetry" in scope:
            await self.framework(scope, receive, send)
            return
        if tuple(map(len, self._lists)) != self._sizes or not self._sizes:
            self._build()
        path = get_route_path(scope)
        if "\n" in path:  # "$" matches before a final newline: such paths are the framework's
            await self.framework(scope, receive, send)
            return
        for leaf in self._buckets.get(_key(path), self._unkeyed):
            if not path.startswith(leaf.literal):
                continue
            context = leaf.context
            if context is None:
                break
            match, child_scope = context.matches(scope)
            if match is Match.FULL:
                fastapi_scope = scope.setdefault(_FASTAPI_SCOPE_KEY, {})
                if not isinstance(fastapi_scope, dict):
                    break
                # As FastAPI's router does: APIRouter.app, _IncludedRouter.handle, then _handle_selected.
                if "router" not in scope:
                    scope["router"] = self.router
                fastapi_scope[_FASTAPI_INCLUDED_ROUTER_KEY] = leaf.included
                child_scope["route"] = leaf.route
                scope.update(child_scope)
                fastapi_scope[_FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY] = context
                scope["route"] = leaf.route
                await leaf.route.handle(scope, receive, send)
                return
        await self.framework(scope, receive, send)


def install_route_index(app: Any) -> None:
    """Route ``app``'s HTTP requests through a :class:`RouteIndex` (nothing changes where it cannot)."""
    router = app.router
    if (
        _INDEXABLE
        and isinstance(router, APIRouter)
        and router.middleware_stack == router.app
        and not router.form_limits
    ):
        router.middleware_stack = RouteIndex(router)
