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

from fastapi import Request, Response
from fastapi.routing import APIRoute, APIRouter
from starlette._utils import get_route_path
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from parley.kit.db import end_request_unit
from parley.kit.direct import direct_handler

try:  # FastAPI 0.165's included-router bookkeeping; without it, no prefix skipping
    from fastapi.routing import (
        _FASTAPI_INCLUDED_ROUTER_KEY,
        _FASTAPI_SCOPE_KEY,
        _IncludedRouter,
    )
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
