"""Direct request handlers: FastAPI's work for a plain route, without its general machinery.

FastAPI's request handler is general: for every request it builds a throw-away ``Response`` for
dependencies that never use it, parses the query string, the cookies and the headers whether or not
a parameter reads them, walks the dependency tree recursively with a cache keyed per dependency, and
enters telemetry contexts. For Parley's common route (a few path, query or body parameters and
dependencies that take only the ``Request``, such as the identity) that is most of FastAPI's
per-request cost.

:func:`direct_handler` compiles such a route into a handler that does the same work in a straight
line, with FastAPI's own functions: ``request_body_to_args`` validates the body, each parameter's
own FastAPI field validates it (a plain path, query, header or cookie parameter is read as
``request_params_to_args`` reads it, with what that function works out per request about the field
worked out once; sequences and parameter models go through the function itself), and
``serialize_response`` validates and serializes the result. It serves only the
request whose parameters are valid; anything else is handed, untouched, to FastAPI's own handler
before any dependency has run: invalid input (so the 422 body, and the order "dependencies first,
then validation errors", are FastAPI's), a body that is not plain JSON, dependency overrides (tests)
and FastAPI's native telemetry. Dependencies with ``yield`` are entered with FastAPI's own
function into its exit stacks. A route that uses anything else (a ``Response`` or ``BackgroundTasks``
parameter, a synchronous dependency, a form, a streamed response) is not compiled at all.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine
from copy import deepcopy
from typing import Any

from fastapi import Request, Response, params
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_body_to_args, request_params_to_args
from fastapi.routing import APIRoute, serialize_response
from fastapi.utils import is_body_allowed_for_status_code
from starlette.responses import StreamingResponse

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

try:  # FastAPI's own modules of the versions this was written against; without them: no compiling
    from fastapi import routing as _fastapi_routing
    from fastapi.datastructures import DefaultPlaceholder
    from fastapi.dependencies.utils import _solve_generator
    from fastapi.routing import _extract_endpoint_context
    from fastapi.telemetry._api import get_telemetry_data
except ImportError:  # pragma: no cover - another FastAPI version
    _COMPILABLE = False
else:
    _COMPILABLE = True


try:  # how FastAPI reads one parameter; without them every parameter goes through request_params_to_args
    from fastapi._compat import field_annotation_is_sequence
    from fastapi.dependencies.utils import _get_param_aliases, _get_param_model
except ImportError:  # pragma: no cover - another FastAPI version
    _READABLE = False
else:
    _READABLE = True

ParamsReader = Callable[[Any], "dict[str, Any] | None"]


def _is_plain_param(field: Any) -> bool:
    """A path, query, header or cookie parameter of one value (no sequence, no model of parameters)."""
    return (
        isinstance(field.field_info, params.Param)
        and _get_param_model(field) is None
        and not field_annotation_is_sequence(field.field_info.annotation)
    )


def _params_reader(fields: list[Any]) -> ParamsReader:
    """``received -> values`` for ``fields``, or None when one does not validate (FastAPI's handler then
    answers). ``request_params_to_args`` decides per request, for each field, whether it is a model of
    parameters or a sequence and which names it answers to; for plain parameters this decides that once
    and then does the same per request: the first of the names the request has (else the first name),
    missing when absent (required: invalid; else a copy of the default, validated if the field says
    so), then FastAPI's own validation of the field. Other fields go through request_params_to_args."""
    if not (_READABLE and all(_is_plain_param(field) for field in fields)):

        def read_generally(received: Any) -> dict[str, Any] | None:
            found, errors = request_params_to_args(fields, received)
            return None if errors else found

        return read_generally
    plan = [
        (
            field,
            field.name,
            tuple(key for _, key in _get_param_aliases(field)),
            field.field_info.in_.value,
            field.field_info.is_required(),
            field.field_info.validate_default,
        )
        for field in fields
    ]

    def read(received: Any) -> dict[str, Any] | None:
        values: dict[str, Any] = {}
        for field, name, keys, kind, required, validate_default in plan:
            key = keys[0]
            if len(keys) > 1:
                key = next((candidate for candidate in keys if candidate in received), key)
            value = received.get(key, None)
            if value is None:
                if required:
                    return None
                value = deepcopy(field.default)
                if not validate_default:
                    values[name] = value
                    continue
            valid, errors = field.validate(value, values, loc=(kind, key))
            if errors:
                return None
            values[name] = valid
        return values

    return read


def _is_plain_coroutine(call: Any) -> bool:
    if inspect.isclass(call):
        return False
    function = call if inspect.isroutine(call) else getattr(call, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function) and not inspect.isasyncgenfunction(function)


_PARAM_SOURCES = ("path_params", "query_params", "header_params", "cookie_params")


def _fields_of(dependant: Dependant) -> list[tuple[str, list[Any]]]:
    """(where in the request, FastAPI's fields) for each kind of parameter ``dependant`` reads."""
    return [(source, getattr(dependant, source)) for source in _PARAM_SOURCES if getattr(dependant, source)]


class _Step:
    """One dependency call: its own parameters (validated with the route's), the request, and the
    values of the dependencies it depends on (earlier steps)."""

    __slots__ = ("call", "dependant", "fields", "inputs", "request_name", "same_as", "stack_key")

    def __init__(self, dependant: Dependant, same_as: int = -1) -> None:
        assert dependant.call is not None
        self.call: Callable[..., Any] = dependant.call
        self.dependant = dependant
        # A dependency with yield is entered as FastAPI enters it (its own function, the same exit
        # stacks): "function" scope ends with the handler, the default scope after the response.
        self.stack_key: str | None = None
        if inspect.isasyncgenfunction(self.call):
            function_scope = dependant.scope == "function"
            self.stack_key = "fastapi_function_astack" if function_scope else "fastapi_inner_astack"
        self.fields: list[tuple[str, list[Any]]] = []  # (request attribute, FastAPI fields)
        self.request_name: str | None = None
        self.inputs: list[tuple[str, int]] = []  # (argument, index of the step giving it)
        self.same_as = same_as


def _plan(dependant: Dependant, steps: list[_Step], first_of: dict[Any, int]) -> list[tuple[str, int]] | None:
    """Append the steps of ``dependant``'s dependencies, depth first as FastAPI solves them; answer
    (name, step) for each, or None when one needs FastAPI's general handler."""
    named: list[tuple[str, int]] = []
    for sub in dependant.dependencies:
        if (
            sub.call is None
            or not (_is_plain_coroutine(sub.call) or inspect.isasyncgenfunction(sub.call))
            or sub.body_params
            or sub.websocket_param_name is not None
            or sub.http_connection_param_name is not None
            or sub.response_param_name is not None
            or sub.background_tasks_param_name is not None
            or sub.security_scopes_param_name is not None
            or getattr(sub, "concurrency", None) is not None
        ):
            return None
        if sub.use_cache and sub.call in first_of:
            index = len(steps)
            steps.append(_Step(sub, same_as=first_of[sub.call]))
        else:
            inputs = _plan(sub, steps, first_of)
            if inputs is None:
                return None
            step = _Step(sub)
            step.inputs = inputs
            step.request_name = sub.request_param_name
            step.fields = _fields_of(sub)
            index = len(steps)
            steps.append(step)
            if sub.use_cache:
                first_of[sub.call] = index
        if sub.name is not None:
            named.append((sub.name, index))
    return named


def _received(request: Request, source: str) -> Any:
    if source == "path_params":
        return request.path_params
    if source == "query_params":
        return request.query_params
    if source == "header_params":
        return request.headers
    return request.cookies


def _json_content_type(value: str | None) -> bool:
    """``application/json`` (any parameters): the one body type served directly."""
    return value is not None and value.partition(";")[0].strip().lower() == "application/json"


def _effective_route(route: APIRoute) -> Any:
    """The route as FastAPI handles it: an included route's effective context (its router's prefix
    and dependencies) while FastAPI builds its handler, else the route itself."""
    context_var = getattr(_fastapi_routing, "_effective_route_context_var", None)
    context = context_var.get() if context_var is not None else None
    if context is not None and getattr(context, "original_route", None) is route:
        return context
    return route


def direct_handler(route: APIRoute, fallback: Handler) -> Handler | None:
    """A direct handler for ``route``, or None when the route needs FastAPI's general handler.

    Call it from ``get_route_handler``, where FastAPI builds ``fallback``: the route's effective
    context is only known there.
    """
    if not _COMPILABLE:
        return None
    effective = _effective_route(route)
    dependant: Dependant = effective.dependant
    call = dependant.call
    body_field = effective.body_field
    response_class = effective.response_class
    actual_class = response_class.value if isinstance(response_class, DefaultPlaceholder) else response_class
    if (
        call is None
        or not _is_plain_coroutine(call)
        or getattr(effective, "stream_item_field", None) is not None
        or getattr(effective, "is_json_stream", False)
        or (isinstance(actual_class, type) and issubclass(actual_class, StreamingResponse))
        or (body_field is not None and isinstance(body_field.field_info, params.Form))
        or dependant.websocket_param_name is not None
        or dependant.http_connection_param_name is not None
        or dependant.response_param_name is not None
        or dependant.background_tasks_param_name is not None
        or dependant.security_scopes_param_name is not None
    ):
        return None
    steps: list[_Step] = []
    route_inputs = _plan(dependant, steps, {})
    if route_inputs is None:
        return None
    # Every parameter of the request, the dependencies' own included, is validated before anything runs.
    step_fields = [
        (index, [(source, _params_reader(fields)) for source, fields in step.fields])
        for index, step in enumerate(steps)
        if step.fields
    ]

    route_fields = [(source, _params_reader(fields)) for source, fields in _fields_of(dependant)]
    body_params = dependant.body_params
    embed_body_fields = effective._embed_body_fields
    request_param_name = dependant.request_param_name
    overrides_provider = effective.dependency_overrides_provider
    status_code = effective.status_code
    response_field = effective.response_field
    use_dump_json = response_field is not None and isinstance(response_class, DefaultPlaceholder)
    # What FastAPI names in a response validation error: the endpoint, and "METHOD path" per request.
    endpoint_context: Any = dict(_extract_endpoint_context(call))
    contexts: dict[str, Any] = {
        method: {**endpoint_context, "path": f"{method} {dependant.path}"} for method in route.methods or ()
    }
    serialize_options = {
        "field": response_field,
        "include": effective.response_model_include,
        "exclude": effective.response_model_exclude,
        "by_alias": effective.response_model_by_alias,
        "exclude_unset": effective.response_model_exclude_unset,
        "exclude_defaults": effective.response_model_exclude_defaults,
        "exclude_none": effective.response_model_exclude_none,
        "is_coroutine": True,
        "dump_json": use_dump_json,
    }
    response_args: dict[str, Any] = {"status_code": status_code} if status_code else {}

    async def handle(request: Request) -> Response:
        if (overrides_provider is not None and overrides_provider.dependency_overrides) or (
            get_telemetry_data() is not None
        ):
            return await fallback(request)
        values: dict[str, Any] = {}
        for source, read in route_fields:
            found = read(_received(request, source))
            if found is None:
                return await fallback(request)
            values.update(found)
        if body_field is not None:
            raw_body = await request.body()
            if not raw_body or not _json_content_type(request.headers.get("content-type")):
                return await fallback(request)
            try:
                body = json.loads(raw_body)
            except Exception:  # not JSON, or nested too deep: FastAPI's handler answers it (400/422)
                return await fallback(request)
            found, body_errors = await request_body_to_args(
                body_fields=body_params, received_body=body, embed_body_fields=embed_body_fields
            )
            if body_errors:
                return await fallback(request)
            values.update(found)
        if request_param_name is not None:
            values[request_param_name] = request
        arguments: list[dict[str, Any]] = [{} for _ in steps] if step_fields else []
        for index, readers in step_fields:
            for source, read in readers:
                found = read(_received(request, source))
                if found is None:
                    return await fallback(request)
                arguments[index].update(found)
        solved: list[Any] = []
        for index, step in enumerate(steps):
            if step.same_as >= 0:
                solved.append(solved[step.same_as])
                continue
            kwargs = arguments[index] if step_fields else {}
            if step.request_name is not None:
                kwargs[step.request_name] = request
            for argument, given_by in step.inputs:
                kwargs[argument] = solved[given_by]
            if step.stack_key is None:
                solved.append(await step.call(**kwargs))
            else:
                stack = request.scope[step.stack_key]
                solved.append(
                    await _solve_generator(
                        request=request, dependant=step.dependant, stack=stack, sub_values=kwargs
                    )
                )
        for name, index in route_inputs:
            values[name] = solved[index]
        raw = await call(**values)
        if isinstance(raw, Response):
            return raw
        content = await serialize_response(
            response_content=raw,
            endpoint_ctx=contexts.get(request.method, endpoint_context),
            **serialize_options,
        )
        response = (
            Response(content=content, media_type="application/json", **response_args)
            if use_dump_json
            else actual_class(content, **response_args)
        )
        if not is_body_allowed_for_status_code(response.status_code):
            response.body = b""
        return response

    return handle
