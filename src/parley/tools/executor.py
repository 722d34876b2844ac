"""Running a tool: the one entry point the conversation runtime and ``POST /api/tools/{id}/test`` use.

``execute_tool`` validates the arguments against the tool's JSON Schema (raising
:class:`InvalidArguments`), then runs it and always answers a :class:`ToolResult`: upstream failures,
refused destinations and timeouts are results (``status`` error/timeout), never exceptions. Every
outbound call goes through the SSRF-guarded client and reads at most ``MAX_RESPONSE_BYTES``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import re
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import jsonschema
import orjson
from pydantic import BaseModel
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.integrations.service import AccessToken, access_token_for
from parley.kit.crypto import RowSecrets, SecretDecryptionError, row_secrets
from parley.kit.db import Database
from parley.kit.errors import NotFound, ParleyError, UpstreamError
from parley.kit.metrics import observe_tool_call
from parley.kit.outbound import OutboundPolicy, explain, fetch, outbound_policy
from parley.kit.schemas import E164_PATTERN
from parley.kit.templates import TemplateRenderError, render_template
from parley.kit.toolcalls import ToolResult
from parley.tools.models import Tool
from parley.tools.schemas import (
    CONFIG_MODELS,
    ConnectionAuth,
    HttpToolConfig,
    KnowledgeSearchConfig,
    OrderLookupConfig,
    TransferConfig,
)

MAX_RESPONSE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ArgumentError:
    path: tuple[str | int, ...]
    message: str


@dataclass
class InvalidArguments(Exception):
    errors: list[ArgumentError] = field(default_factory=list)

    def __str__(self) -> str:
        return "; ".join(e.message for e in self.errors)


BUILTIN_PARAMETERS: dict[str, dict[str, Any]] = {
    "order_lookup": {
        "type": "object",
        "properties": {
            "order_id": {
                "type": ["string", "integer"],
                "pattern": r"^\s*[0-9]{1,19}\s*$",
                "minimum": 1,
                "description": "The order number (digits).",
            }
        },
        "required": ["order_id"],
        "additionalProperties": False,
    },
    "knowledge_search": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 1000},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "end_session": {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": 500}},
        "additionalProperties": False,
    },
    "transfer": {
        "type": "object",
        "properties": {
            "phone_number": {"type": "string", "pattern": E164_PATTERN},
            "message": {"type": "string", "maxLength": 1000},
        },
        "additionalProperties": False,
    },
}


def parameters_of(tool: Tool | Row[Any]) -> dict[str, Any]:
    if tool.type == "http":
        return dict(tool.config.get("parameters") or {"type": "object", "properties": {}})
    return BUILTIN_PARAMETERS[tool.type]


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(
        parameters_of(tool), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = [
        ArgumentError(tuple(error.absolute_path), error.message)
        for error in sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if errors:
        raise InvalidArguments(errors)


def tool_secrets(settings: Settings, tool: Tool) -> RowSecrets:
    """A tool's secrets are sealed to ``tools:<id>:secrets.<name>``."""
    return row_secrets(settings, tool, prefix="secrets.")


class _Refused(Exception):
    """The call cannot be made as configured (bad template, URL, secret); the message is safe."""


def _secrets(settings: Settings, tool: Tool) -> dict[str, str]:
    sealer = tool_secrets(settings, tool)
    out = {}
    for name, token in (tool.secrets or {}).items():
        try:
            out[name] = sealer.open(name, token)
        except SecretDecryptionError as exc:
            raise _Refused(
                f"The stored secret {name!r} cannot be decrypted (was the secret key changed?); set it again."
            ) from exc
    return out


async def execute_tool(
    session: AsyncSession, settings: Settings, tool: Tool, arguments: dict[str, Any]
) -> ToolResult:
    """Run ``tool`` with ``arguments``; raise :class:`InvalidArguments` when they do not fit its schema."""
    validate_arguments(tool, arguments)
    started = time.perf_counter()
    try:
        result = await _dispatch(session, settings, tool, arguments)
    except _Refused as exc:
        result = ToolResult("error", error=str(exc))
    result.latency_ms = round((time.perf_counter() - started) * 1000, 2)
    observe_tool_call(tool.type, result.status, result.latency_ms)
    return result


async def _dispatch(
    session: AsyncSession, settings: Settings, tool: Tool, arguments: dict[str, Any]
) -> ToolResult:
    config = CONFIG_MODELS[tool.type].model_validate(tool.config)
    if isinstance(config, HttpToolConfig):
        return await _run_http(settings, tool, config, arguments, session=session)
    if isinstance(config, OrderLookupConfig):
        return await _run_order_lookup(settings, tool, config, arguments)
    if isinstance(config, KnowledgeSearchConfig):
        return await _run_knowledge_search(session, tool, config, arguments)
    return _session_action(config, arguments)


def _session_action(config: BaseModel, arguments: dict[str, Any]) -> ToolResult:
    """The action a ``transfer``/``end_session`` tool asks for. Running the tool is asking: the
    conversation runtime transfers or ends the call (``performed`` says the tool itself did not)."""
    if isinstance(config, TransferConfig):
        action = {
            "action": "transfer",
            "to": arguments.get("phone_number") or config.phone_number,
            "message": arguments.get("message") or config.message,
        }
    else:
        action = {
            "action": "end_session",
            "reason": arguments.get("reason"),
            "message": getattr(config, "message", ""),
        }
    return ToolResult("ok", result={**action, "performed": False}, action=action)


# --- http -------------------------------------------------------------------------------------------

_WHOLE_VARIABLE = re.compile(r"^\{\{\s*([A-Za-z][A-Za-z0-9_]*)\s*\}\}$")
# A template that reads the tool's secrets (in an expression or a statement).
_USES_SECRETS = re.compile(r"\{[{%][^}]*\bsecrets\b")


def _render(text: str, context: dict[str, Any], what: str) -> str:
    try:
        return render_template(text, context)
    except TemplateRenderError as exc:
        raise _Refused(f"The {what} template cannot be rendered: {exc}") from exc


def _render_json(value: Any, context: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = _WHOLE_VARIABLE.match(value)
        if whole and whole.group(1) in context:
            return context[whole.group(1)]
        return _render(value, context, "body")
    if isinstance(value, dict):
        return {k: _render_json(v, context) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_json(v, context) for v in value]
    return value


def _url_safe(value: Any) -> Any:
    # Arguments placed into a URL are percent-encoded, so "../admin" cannot change the path; nested
    # values (``args.address.street``) are encoded leaf by leaf.
    if isinstance(value, dict):
        return {k: _url_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_url_safe(v) for v in value]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        # Dots too: a bare ".." segment would otherwise climb out of the path when the URL is normalised.
        return quote(str(value), safe="").replace(".", "%2E")
    return value


def _header_value(name: str, value: str) -> str:
    if "\r" in value or "\n" in value:
        raise _Refused(f"The header {name!r} would contain a line break.")
    return value


def _render_request(
    settings: Settings, tool: Tool, config: HttpToolConfig, arguments: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    context = {**arguments, "args": arguments}
    safe_arguments = _url_safe(arguments)
    url_context = {**safe_arguments, "args": safe_arguments}
    with_secrets = {**context, "secrets": _secrets(settings, tool)}
    url = _render(config.url, url_context, "url").strip()
    if not url.lower().startswith(("http://", "https://")):
        raise _Refused("The rendered URL does not start with http:// or https://.")
    headers = {
        k: _header_value(k, _render(v, with_secrets, f"header {k!r}")) for k, v in config.headers.items()
    }
    # A header made from a secret is a credential: it does not follow a redirect to another origin.
    credentials = [k for k, v in config.headers.items() if _USES_SECRETS.search(v)]
    params = {k: _render(v, with_secrets, f"query parameter {k!r}") for k, v in config.query.items()}
    try:
        # Query parameters add to those written in the URL (httpx's params= would replace them).
        url = str(httpx.URL(url).copy_merge_params(params)) if params else url
    except httpx.InvalidURL as exc:
        raise _Refused("The rendered URL is not valid.") from exc
    request: dict[str, Any] = {"headers": headers, "credentials": credentials}
    if config.body is not None and config.method != "GET":
        request["json"] = _render_json(config.body, context)
    return url, request


async def _run_http(
    settings: Settings,
    tool: Tool,
    config: HttpToolConfig,
    arguments: dict[str, Any],
    *,
    session: AsyncSession | None = None,
) -> ToolResult:
    # Templates render in a worker thread (each within its budget), never on the event loop.
    url, request = await asyncio.to_thread(_render_request, settings, tool, config, arguments)
    policy = outbound_policy(settings)
    if config.auth is None:
        result = await _call(policy, config.method, url, config.timeout_seconds, **request)
    else:
        result = await _call_connected(session, settings, tool, config.auth, config, url, request)
    if config.response_mapping and result.status == "ok" and isinstance(result.result, dict | list):
        result.result = {name: extract(result.result, path) for name, path in config.response_mapping.items()}
    return result


# A connection's token is refreshed when it expires within this many seconds of a tool call.
CONNECTION_TOKEN_MARGIN_SECONDS = 60.0


async def _connection_token(
    session: AsyncSession | None, settings: Settings, tool: Tool, auth: ConnectionAuth, *, force: bool
) -> AccessToken:
    """The connection's access token, refreshed first when it is about to expire (or ``force``).

    The refresh runs in short units of its own (``access_token_for``): no transaction is open while
    the provider answers. Every failure is a refusal with a reason the flow's fallback can rely on."""
    database: Database | None = session.info.get("database") if session is not None else None
    if database is None:
        raise _Refused("The tool's connection cannot be reached from here (no database).")
    try:
        return await access_token_for(
            database,
            settings,
            auth.connection_id,
            organization_id=tool.organization_id,
            force=force,
            margin=CONNECTION_TOKEN_MARGIN_SECONDS,
        )
    except NotFound as exc:
        raise _Refused(
            f"The integration connection {auth.connection_id!r} this tool signs in with no longer exists "
            "(it was disconnected); connect the account again and choose the new connection."
        ) from exc
    except ParleyError as exc:
        raise _Refused(f"The integration connection gave no usable access token: {exc.detail}") from exc


async def _call_connected(
    session: AsyncSession | None,
    settings: Settings,
    tool: Tool,
    auth: ConnectionAuth,
    config: HttpToolConfig,
    url: str,
    request: dict[str, Any],
) -> ToolResult:
    """The call with the connection's token; a 401 with a token that was not just refreshed is tried
    once more with a freshly refreshed one (the provider may have revoked it before its expiry)."""
    policy = outbound_policy(settings)
    token = await _connection_token(session, settings, tool, auth, force=False)
    for attempt in range(2):
        headers = {**request["headers"], auth.header: _header_value(auth.header, auth.value(token.token))}
        credentials = [*request["credentials"], auth.header]
        result = await _call(
            policy,
            config.method,
            url,
            config.timeout_seconds,
            **{**request, "headers": headers, "credentials": credentials},
        )
        if result.http_status != 401 or token.refreshed or attempt:
            break
        token = await _connection_token(session, settings, tool, auth, force=True)
    if result.http_status == 401:
        result.error = (
            "The upstream service refused the connection's access token (HTTP 401); "
            "the account may need to be connected again."
        )
    return result


async def _call(
    policy: OutboundPolicy,
    method: str,
    url: str,
    seconds: float,
    headers: dict[str, str],
    json: Any = None,
    credentials: Collection[str] = (),
) -> ToolResult:
    try:
        # No client per call: the request goes straight to the connections kept for its origin.
        answer = await fetch(
            policy,
            method,
            url,
            headers=headers,
            json=json,
            timeout=seconds,  # every step and the whole call, however slowly the body trickles in
            limit=MAX_RESPONSE_BYTES,
            credentials=credentials,
        )
    except (TimeoutError, httpx.TimeoutException):
        return ToolResult("timeout", error=f"The upstream service did not answer within {seconds:g} s.")
    except httpx.InvalidURL:
        return ToolResult("error", error="The URL is not valid.")
    except httpx.HTTPError as exc:
        return ToolResult("error", error=explain(exc))
    except UpstreamError as exc:
        return ToolResult("error", error=exc.detail)
    status_code = answer.status_code
    body = _parse_body(answer.content, answer.headers.get("content-type", ""))
    if 200 <= status_code < 300:
        return ToolResult("ok", http_status=status_code, result=body)
    return ToolResult(
        "error",
        http_status=status_code,
        result=body,
        error=f"The upstream service answered HTTP {status_code}.",
    )


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    stripped = raw.lstrip()[:1]
    if "json" in content_type or stripped in (b"{", b"["):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return raw.decode("utf-8", "replace")


def extract(data: Any, path: str) -> Any:
    """A value by JSON pointer (``/order/status``) or dotted path (``order.status``); None if absent."""
    if path.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    else:
        parts = [p for p in path.split(".") if p]
    current = data
    for part in parts:
        if isinstance(current, dict):
            if part not in current:
                return None
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


# --- order_lookup -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


async def _run_order_lookup(
    settings: Settings, tool: Tool, config: OrderLookupConfig, arguments: dict[str, Any]
) -> ToolResult:
    base = (config.connector_url or settings.connector_url).rstrip("/")
    policy = outbound_policy(settings)
    if _origin(base) == _origin(settings.connector_url):
        # The operator's own connector is trusted even on a private address; nothing else is.
        policy = policy.allowing(_origin(settings.connector_url)[1])
    order_id = str(arguments["order_id"]).strip()
    # The connector counts failed keys per organization too, so one tenant cannot lock out the others.
    headers = {"Accept": "application/json", "X-Parley-Organization": tool.organization_id}
    api_key = _secrets(settings, tool).get("api_key")
    if api_key:
        headers["X-API-Key"] = _header_value("X-API-Key", api_key)
    url = f"{base}/api/orders/{quote(order_id, safe='')}"
    result = await _call(policy, "GET", url, config.timeout_seconds, headers, credentials=["X-API-Key"])
    envelope = result.result
    if result.http_status == 404 and isinstance(envelope, dict) and "success" in envelope:
        # "No such order" is an answer the flow branches on, not a failure of the tool.
        return ToolResult("not_found", latency_ms=result.latency_ms, http_status=404, result=envelope)
    if result.status == "error" and isinstance(envelope, dict) and isinstance(envelope.get("message"), str):
        result.error = f"The order connector answered HTTP {result.http_status}: {envelope['message'][:200]}"
    return result


# --- knowledge_search -------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return value
    return {k: getattr(value, k) for k in ("document_id", "chunk_id", "text", "score") if hasattr(value, k)}


async def _run_knowledge_search(
    session: AsyncSession, tool: Tool, config: KnowledgeSearchConfig, arguments: dict[str, Any]
) -> ToolResult:
    try:
        knowledge = importlib.import_module("parley.knowledge.service")
    except ImportError:
        return ToolResult("error", error="Knowledge search is not available on this installation.")
    hits = await knowledge.search(
        session,
        tool.organization_id,
        arguments["query"],
        top_k=int(arguments.get("top_k") or config.top_k),
        document_ids=config.document_ids,
    )
    return ToolResult("ok", result=[_jsonable(hit) for hit in hits])
