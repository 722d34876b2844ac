"""OpenAPI completion: the three body media types, and every error response documented."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from parley.kit.body import BODY_MODEL_ATTR
from parley.kit.errors import ErrorBody

REF = "#/components/schemas/{model}"


def _body_model(route: APIRoute) -> type[BaseModel] | None:
    for dependency in route.dependant.dependencies:
        model = getattr(dependency.call, BODY_MODEL_ATTR, None)
        if model is not None:
            return model  # type: ignore[no-any-return]
    return None


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model="ErrorBody")}}},
    }


def install_openapi(
    app: FastAPI, *, routers: Iterable[APIRouter], title: str, version: str, description: str
) -> None:
    """Complete the generated document: body media types from ``ParsedBody`` and error responses."""
    body_models = {
        route.name: model
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute) and (model := _body_model(route)) is not None
    }

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=title, version=version, description=description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template=REF))
        for path, operations in schema["paths"].items():
            for operation in operations.values():
                _complete_operation(
                    path, operation, body_models.get(operation.get("operationId", "")), components
                )
        _ensure_validation_schemas(components)
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]


def _complete_operation(
    path: str, operation: dict[str, Any], model: type[BaseModel] | None, components: dict[str, Any]
) -> None:
    responses = operation.setdefault("responses", {})
    if path.startswith("/api/"):
        responses.setdefault("400", _error("The request is malformed or ambiguous."))
        responses.setdefault("401", _error("Missing, invalid or expired credentials."))
        responses.setdefault("403", _error("The caller's role does not allow this."))
        if "{" in path:
            responses.setdefault("404", _error("No such resource in the active organization."))
        responses.setdefault("429", _error("Rate limit exceeded; see Retry-After."))
        responses.setdefault(
            "503", _error("The identity provider, the database or storage is unavailable; retry later.")
        )
    if model is None:
        return
    body_schema = model.model_json_schema(ref_template=REF)
    for name, definition in body_schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault(model.__name__, body_schema)
    ref = {"$ref": REF.format(model=model.__name__)}
    operation["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {"schema": ref},
            "multipart/form-data": {"schema": ref},
            "text/plain": {"schema": {"type": "string", "description": f"JSON text of {model.__name__}"}},
        },
    }
    responses.setdefault(
        "422",
        {
            "description": "Validation Error",
            "content": {"application/json": {"schema": {"$ref": REF.format(model="HTTPValidationError")}}},
        },
    )
    responses.setdefault("413", _error("The request body is too large."))
    responses.setdefault("415", _error("The body's media type is not accepted."))


def _ensure_validation_schemas(components: dict[str, Any]) -> None:
    components.setdefault(
        "ValidationError",
        {
            "title": "ValidationError",
            "type": "object",
            "required": ["loc", "msg", "type"],
            "properties": {
                "loc": {
                    "title": "Location",
                    "type": "array",
                    "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                },
                "msg": {"title": "Message", "type": "string"},
                "type": {"title": "Error Type", "type": "string"},
                "input": {"title": "Input"},
                "ctx": {"title": "Context", "type": "object"},
            },
        },
    )
    components.setdefault(
        "HTTPValidationError",
        {
            "title": "HTTPValidationError",
            "type": "object",
            "properties": {
                "detail": {
                    "title": "Detail",
                    "type": "array",
                    "items": {"$ref": REF.format(model="ValidationError")},
                }
            },
        },
    )
