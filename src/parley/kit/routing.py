"""Parley's router and route classes.

- :class:`UnitOfWorkRoute` ends the request's unit of work with the handler. A dependency with
  ``yield`` would do the same, but FastAPI pays for one on every request (an exit stack, a cancel
  scope, a context manager); ending the unit here costs one call, and nothing when the request opened
  no unit. The app refuses to start with an API route of another class (:func:`check_route_classes`).
  Its handler is a direct one (:mod:`parley.kit.direct`) wherever the route allows: FastAPI's work
  without its general machinery.
- :class:`ParleyRouter` (every domain's ``router``) uses that route class and answers "no match" at
  once for a path outside its prefix. FastAPI matches an included router by trying each of its routes
  in turn (a regular expression and some bookkeeping each, about 1.5 µs); with 36 routers a request
  used to try every route of every router listed before its own.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute, APIRouter
from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Receive, Scope, Send

from parley.kit.db import end_request_unit
from parley.kit.direct import direct_handler

try:  # FastAPI 0.165's included-router bookkeeping; without it, no prefix skipping and no route index
    from fastapi.routing import (
        _FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY,
        _FASTAPI_INCLUDED_ROUTER_KEY,
        _FASTAPI_SCOPE_KEY,
        _apply_router_form_limits,
        _EffectiveRouteContext,
        _IncludedRouter,
        _update_scope,
    )
    from fastapi.telemetry._api import _route_selected
except ImportError:  # pragma: no cover - another FastAPI version
    _PREFIXED = False
else:
    _PREFIXED = True


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
        if self.prefix and _PREFIXED:
            included = scope.get(_FASTAPI_SCOPE_KEY, {}).get(_FASTAPI_INCLUDED_ROUTER_KEY)
            if type(included) is _IncludedRouter and included.original_router is self:
                prefix = included.include_context.prefix + self.prefix
                if not get_route_path(scope).startswith(prefix):
                    return Match.NONE, {}
        return super().matches(scope)


_MISSING = object()
_API_ROUTE_MATCHES = APIRoute.matches
_ANY = "{any}"  # a key's second segment when a route takes any (a parameter there, or a mount)
Key = tuple[str, "str | None"]  # a path's first two segments; None: the path has only one


def _template_keys(template: str, *, mount: bool = False) -> Key | None:
    """The key every path a route template matches has, or None when its first segment may vary."""
    segments = template[1:].split("/", 2)
    if not segments[0] or "{" in segments[0]:
        return None
    if mount:
        return segments[0], _ANY
    if len(segments) == 1:
        return segments[0], None
    return segments[0], (_ANY if "{" in segments[1] else segments[1])


def _path_key(path: str) -> Key:
    segments = path[1:].split("/", 2)
    return segments[0], segments[1] if len(segments) > 1 else None


class RouteIndex:
    """The app's routes by the first two segments of their paths, in front of FastAPI's router.

    FastAPI asks every route and included router of the app, in order, whether it matches; the
    answer for a router listed late costs every earlier one's. Here a request asks only the entries
    that can match its path's first two segments (a router included with a prefix of two segments
    can match no other), in the app's order, with FastAPI's own matching and handling; a route that
    could match anything (a parameter in the first segment) is asked for every path. A request that
    none of them matches, fully or by path only (405), goes through FastAPI's whole walk: trailing-slash
    redirects, low-priority routes and the 404 stay FastAPI's. The index is built again when a route
    is added to the app or to a router whose keys come from its routes rather than its prefix.
    """

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.fallback = router.app
        self._version: tuple[int, ...] = ()
        self._watched: list[APIRouter] = []
        self._pairs: dict[Key, list[BaseRoute]] = {}
        self._firsts: dict[str, list[BaseRoute]] = {}
        self._wild: list[BaseRoute] = []
        self._single_match: set[int] = set()  # ids: FastAPI's included routers are unhashable

    def _current_version(self) -> tuple[int, ...]:
        router = self.router
        return (len(router.routes), router._routes_version, *(r._routes_version for r in self._watched))

    def _entry_keys(self, route: BaseRoute) -> set[Key | None]:
        if isinstance(route, _IncludedRouter):
            prefix = route.include_context.prefix + route.original_router.prefix
            if prefix.count("/") >= 2 and "{" not in prefix:  # every route of it starts with the prefix
                first, second = prefix[1:].split("/", 2)[:2]
                return {(first, second)}
            self._watched.append(route.original_router)
            keys: set[Key | None] = set()
            for context in route.effective_route_contexts():
                leaf = context.starlette_route or context.original_route
                path = getattr(leaf, "path", None) or getattr(context, "path", None)
                if not isinstance(path, str) or not path.startswith("/"):
                    return {None}
                keys.add(_template_keys(path, mount=isinstance(leaf, Mount)))
            return keys
        path = getattr(route, "path", None)
        if isinstance(route, Route | APIRoute | Mount) and isinstance(path, str) and path.startswith("/"):
            return {_template_keys(path, mount=isinstance(route, Mount))}
        return {None}

    def _build(self) -> None:
        self._watched = []
        entries = [(route, self._entry_keys(route)) for route in self.router.routes]
        pairs = {key for _, keys in entries for key in keys if key is not None and key[1] != _ANY}
        firsts = {key[0] for _, keys in entries for key in keys if key is not None}

        def asked(first: str, second: str | None) -> list[BaseRoute]:
            return [
                route
                for route, keys in entries
                if None in keys or (first, _ANY) in keys or (second != _ANY and (first, second) in keys)
            ]

        self._pairs = {pair: asked(*pair) for pair in pairs}
        self._firsts = {first: asked(first, _ANY) for first in firsts}
        self._wild = [route for route, keys in entries if None in keys]
        # Routers matched and handled the way FastAPI's own router class does (ParleyRouter adds only a
        # prefix check, which the index has made already).
        self._single_match = {
            id(route)
            for route, _ in entries
            if type(route) is _IncludedRouter
            and type(route.original_router).matches in (APIRouter.matches, ParleyRouter.matches)
            and type(route.original_router).handle is APIRouter.handle
        }
        self._version = self._current_version()

    def candidates(self, path: str) -> list[BaseRoute]:
        if self._current_version() != self._version:
            self._build()
        key = _path_key(path)
        found = self._pairs.get(key)
        if found is None:
            found = self._firsts.get(key[0], self._wild)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.fallback(scope, receive, send)
            return
        router = self.router
        _apply_router_form_limits(scope, router.form_limits)
        if "router" not in scope:
            scope["router"] = router
        partial: tuple[BaseRoute, Scope] | None = None
        for route in self.candidates(get_route_path(scope)):
            if id(route) in self._single_match:
                assert isinstance(route, _IncludedRouter)
                match, child_scope = await self._matched_once(route, scope, receive, send)
                if match is None:
                    return  # handled
            else:
                match, child_scope = route.matches(scope)
            if match == Match.FULL:
                partial = (route, child_scope)
                break
            if match == Match.PARTIAL and partial is None:
                partial = (route, child_scope)
        if partial is None:
            await self.fallback(scope, receive, send)
            return
        route, child_scope = partial
        _update_scope(scope, child_scope)
        _route_selected(scope=scope, path=getattr(route, "path_format", None), mount=isinstance(route, Mount))
        await route.handle(scope, receive, send)

    @staticmethod
    async def _matched_once(
        included: _IncludedRouter, scope: Scope, receive: Receive, send: Send
    ) -> tuple[Match | None, Scope]:
        """An included router's route, matched once: FastAPI matches the router (walking its routes),
        then walks them again to handle the request. A request that fully matches an API route of it is
        handled here as FastAPI's ``_handle_selected`` would (``(None, {})``); for anything else the
        router's match is returned as FastAPI's router would answer it, for FastAPI to handle."""
        fastapi_scope = scope.setdefault(_FASTAPI_SCOPE_KEY, {})
        previous = fastapi_scope.get(_FASTAPI_INCLUDED_ROUTER_KEY, _MISSING)
        fastapi_scope[_FASTAPI_INCLUDED_ROUTER_KEY] = included
        match, child_scope, route, context = _match_in(included, scope)
        if match == Match.FULL and context is not None and isinstance(route, APIRoute):
            _apply_router_form_limits(scope, included.include_context.form_limits)
            _update_scope(scope, child_scope)
            path = getattr(context.starlette_route, "path_format", None) or context.path_format
            _route_selected(scope=scope, path=path, mount=False)
            fastapi_scope[_FASTAPI_EFFECTIVE_ROUTE_CONTEXT_KEY] = context
            scope["route"] = route
            await route.handle(scope, receive, send)
            return None, {}
        if previous is _MISSING:
            fastapi_scope.pop(_FASTAPI_INCLUDED_ROUTER_KEY, None)
        else:
            fastapi_scope[_FASTAPI_INCLUDED_ROUTER_KEY] = previous
        return match, {}


def _match_in(included: _IncludedRouter, scope: Scope) -> tuple[Match, Scope, Any, Any]:
    """FastAPI's ``_match`` of an included router whose routes are all plain API routes, without its
    bookkeeping per route: FastAPI names each route's context in the scope around asking the route,
    which only hands the question to that context (``APIRoute.matches``). Any other router (nested
    routers, mounts, a route class with its own matching) is matched by FastAPI's ``_match``."""
    partial: tuple[Scope, Any, Any] | None = None
    for context in included.effective_candidates():
        route: Any = getattr(context, "original_route", None)
        if (
            type(context) is not _EffectiveRouteContext
            or getattr(type(route), "matches", None) is not _API_ROUTE_MATCHES
        ):
            return included._match(scope)  # FastAPI's walk, from the start
        match, child_scope = context.matches(scope)
        if match == Match.NONE:
            continue
        child_scope["route"] = route
        if match == Match.FULL:
            return match, child_scope, route, context
        if partial is None:
            partial = (child_scope, route, context)
    if partial is not None:
        return Match.PARTIAL, *partial
    return Match.NONE, {}, None, None


def install_route_index(app: FastAPI) -> None:
    """Put a :class:`RouteIndex` in front of the app's router (unless FastAPI's internals differ, or the
    router has middleware of its own, which the index would bypass)."""
    router = app.router
    if _PREFIXED and router.middleware_stack == router.app:
        router.middleware_stack = RouteIndex(router)
