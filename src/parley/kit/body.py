"""One body parser for every route that takes a body.

The spec accepts each body as ``application/json``, ``multipart/form-data`` (fields; lists as repeated
fields or a JSON string) or ``text/plain`` (JSON text). ``ParsedBody(Model)`` reads whichever was sent,
validates it against ``Model`` and reports problems exactly like FastAPI does (422 with a ``detail``
list whose ``loc`` starts with ``"body"``). Routes using it get the three media types in OpenAPI.
"""

from __future__ import annotations

import asyncio
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

import orjson
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile

from parley.kit.errors import UnsupportedMediaType

M = TypeVar("M", bound=BaseModel)

BODY_MEDIA_TYPES = ("application/json", "multipart/form-data", "text/plain")

# Routes register their body model here so the OpenAPI document can describe all three media types.
BODY_MODEL_ATTR = "__parley_body_model__"


def _missing() -> RequestValidationError:
    return RequestValidationError(
        [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
    )


# Deeper bodies are refused before anything recursive (validation, JSON Schema checks) sees them.
MAX_JSON_DEPTH = 64


def _too_deep() -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "json_too_deep",
                "loc": ("body",),
                "msg": f"The body is nested more than {MAX_JSON_DEPTH} levels deep; send a flatter document.",
                "input": None,
            }
        ]
    )


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists/objects deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _quick_depth_ok(raw: bytes) -> bool:
    # Fewer opening brackets than the limit cannot nest deeper than it: the common case costs a count.
    return raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH


def _decode_json(raw: bytes) -> Any:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in exc.msg.lower() or "recursion" in exc.msg.lower():  # orjson stops at 1024 levels
            raise _too_deep() from exc
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", exc.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": exc.msg},
                }
            ]
        ) from exc
    if not _quick_depth_ok(raw) and json_depth_exceeds(value):
        raise _too_deep()
    return value


def _is_list_type(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (list, set, tuple, frozenset):
        return True
    if origin in (Union, types.UnionType):
        return any(_is_list_type(arg) for arg in get_args(annotation) if arg is not type(None))
    return False


def _is_plain_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) is typing.Literal:
        return all(isinstance(a, str) for a in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_plain_str(args[0])
    return False


def _is_nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def _form_value(annotation: Any, values: list[str]) -> Any:
    if _is_nullable(annotation) and len(values) == 1 and values[0] == "null":
        # A form field cannot carry JSON null otherwise; for a nullable property, "null" is null.
        return None
    if _is_list_type(annotation):
        if len(values) == 1 and values[0].lstrip().startswith("["):
            try:
                return orjson.loads(values[0])
            except orjson.JSONDecodeError:
                return values
        return values
    value = values[-1]
    if _is_plain_str(annotation):
        return value
    # Objects, numbers, booleans and null may arrive as JSON text; strings stay as sent otherwise.
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


async def read_body_data(request: Request, model: type[BaseModel]) -> Any:
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == "multipart/form-data" or content_type == "application/x-www-form-urlencoded":
        form = await request.form()
        data: dict[str, Any] = {}
        for key in form:
            values = [v for v in form.getlist(key) if not isinstance(v, UploadFile)]
            if not values:
                continue
            field = model.model_fields.get(key)
            data[key] = _form_value(field.annotation if field else Any, [str(v) for v in values])
        if json_depth_exceeds(data):
            raise _too_deep()
        return data
    raw = await request.body()
    if content_type in ("", "application/json", "text/plain") or content_type.endswith("+json"):
        if not raw.strip():
            raise _missing()
        return _decode_json(raw)
    raise UnsupportedMediaType(
        f"Content-Type {content_type!r} is not accepted; send application/json, "
        "multipart/form-data or text/plain (JSON text)."
    )


def validate_body(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False):
            item = dict(error)
            item["loc"] = ("body", *error["loc"])
            errors.append(item)
        raise RequestValidationError(errors) from exc


# A JSON body this small without template syntax validates in microseconds: on the event loop, since a
# worker thread's hand-off would cost more than the validation (a conversation turn's {"text": ...}).
INLINE_VALIDATION_BYTES = 2048


async def _cheap_to_validate(request: Request) -> bool:
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in ("", "application/json", "text/plain") and not content_type.endswith("+json"):
        return False
    raw = await request.body()  # already read (Starlette keeps it): no second read
    return len(raw) <= INLINE_VALIDATION_BYTES and b"{{" not in raw and b"{%" not in raw


def ParsedBody(model: type[M]) -> Any:
    async def parse(request: Request) -> M:
        data = await read_body_data(request, model)
        if await _cheap_to_validate(request):
            return validate_body(model, data)
        # In a worker thread: validation may check templates (a trial render each) and JSON Schemas,
        # and however long that takes, the event loop keeps serving everyone else.
        return await asyncio.to_thread(validate_body, model, data)

    setattr(parse, BODY_MODEL_ATTR, model)
    return Depends(parse)
