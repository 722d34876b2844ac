"""OpenTelemetry tracing, off by default.

Install the extra (``pip install 'parley[otel]'``) and set ``PARLEY_OTEL_ENDPOINT`` (an OTLP/HTTP
traces endpoint such as ``http://otel-collector:4318/v1/traces``): every request gets a server span,
with child spans for SQL statements (SQLAlchemy) and outbound HTTP calls (httpx: tools, LLMs,
providers). ``/healthz``, ``/readyz`` and ``/metrics`` are not traced. Log lines carry the current
``trace_id`` and ``span_id`` (see ``parley.kit.logging``), so logs and traces join up.

Without the extra or the endpoint nothing is imported and nothing changes.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from parley import __version__
from parley.config import Settings

log = structlog.get_logger("parley.tracing")

EXCLUDED_URLS = "/healthz,/readyz,/metrics"
_httpx_instrumented = False


def install_tracing(app: FastAPI, settings: Settings, *, exporter: Any = None) -> bool:
    """Trace ``app``'s requests when ``PARLEY_OTEL_ENDPOINT`` is set (or ``exporter`` is handed in,
    e.g. an in-memory exporter in tests). Call before the app starts; answers whether tracing is on."""
    if exporter is None and not settings.otel_endpoint:
        return False
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning(
            "tracing_unavailable",
            detail="PARLEY_OTEL_ENDPOINT is set but OpenTelemetry is not installed; pip install 'parley[otel]'.",
        )
        return False
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name, "service.version": __version__})
    )
    processor: SpanProcessor
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otel_endpoint))
    else:
        processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls=EXCLUDED_URLS)
    _instrument_httpx(provider)
    app.state.tracer_provider = provider
    log.info("tracing_enabled", endpoint=settings.otel_endpoint or "in-process exporter")
    return True


def _instrument_httpx(provider: Any) -> None:
    """Outbound HTTP spans (httpx is patched once per process; the first provider wins)."""
    global _httpx_instrumented
    if _httpx_instrumented:
        return
    try:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    except ImportError:
        return
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    _httpx_instrumented = True


def instrument_engine(app: FastAPI, engine: AsyncEngine) -> None:
    """SQL statement spans for ``engine`` when tracing is on (called from the app's start-up)."""
    provider = getattr(app.state, "tracer_provider", None)
    if provider is None or getattr(engine.sync_engine, "_parley_traced", False):
        return
    try:
        from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
        from opentelemetry.instrumentation.sqlalchemy.version import __version__ as sqla_version
        from opentelemetry.metrics import get_meter
        from opentelemetry.trace import get_tracer
    except ImportError:
        return
    tracer = get_tracer("opentelemetry.instrumentation.sqlalchemy", sqla_version, provider)
    usage = get_meter("parley.db").create_up_down_counter("db.client.connections.usage")
    EngineTracer(tracer, engine.sync_engine, usage)  # type: ignore[no-untyped-call]
    engine.sync_engine._parley_traced = True  # type: ignore[attr-defined]


def shutdown_tracing(app: FastAPI) -> None:
    """Flush spans still buffered (the batch processor exports in the background)."""
    provider = getattr(app.state, "tracer_provider", None)
    if provider is not None:
        provider.shutdown()
