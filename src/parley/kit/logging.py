"""Structured JSON logs; credentials are dropped and personal data in texts is replaced.

Each line written while serving a request carries its ``request_id`` (and ``session_id`` on a
session's routes and audio socket), bound by ``RequestContextMiddleware`` through structlog's context
variables; with tracing on (``parley.kit.tracing``) lines also carry ``trace_id`` and ``span_id``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from parley.kit.redaction import Redactor

_REDACTED_KEYS = frozenset(
    {
        "authorization",
        "token",
        "access_token",
        "refresh_token",
        "api_key",
        "password",
        "secret",
        "email",
        "phone",
        "x-api-key",
        "cookie",
        "key",
    }
)


def _redact(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        if key.lower() in _REDACTED_KEYS:
            event[key] = "[redacted]"
    return event


_LOG_REDACTOR = Redactor()


def _redact_personal_data(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Phone numbers, e-mail addresses, IBANs and card numbers in any logged text are replaced
    (``PARLEY_LOG_REDACTION``, on by default), whichever organization's call the line is about."""
    for key, value in event.items():
        if isinstance(value, str) and key not in _KEPT_KEYS:
            event[key] = _LOG_REDACTOR.text(value)
        elif isinstance(value, dict | list | tuple):
            event[key] = _LOG_REDACTOR.value(value)
    return event


# Fields that are never personal data and that redaction would only slow down (or mangle: a
# timestamp's digits); the event name stays readable.
_KEPT_KEYS = frozenset({"timestamp", "level", "logger", "request_id", "trace_id", "span_id"})


def _trace_ids() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None

    def add_trace_ids(
        _logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            event.setdefault("trace_id", format(context.trace_id, "032x"))
            event.setdefault("span_id", format(context.span_id, "016x"))
        return event

    return add_trace_ids


# The level configure_logging set: structlog's filtering logger drops lines below it, but a caller
# building a line's fields on every request (the access log) can skip that work too.
_threshold = logging.NOTSET


def enabled_for(level: int) -> bool:
    """Whether a line at ``level`` is written (before configure_logging: every line is)."""
    return level >= _threshold


def configure_logging(level: str = "INFO", json: bool = True, *, redact: bool = True) -> None:
    global _threshold
    _threshold = getattr(logging, level)
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    trace_ids = _trace_ids()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *([trace_ids] if trace_ids is not None else []),
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            *([_redact_personal_data] if redact else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
