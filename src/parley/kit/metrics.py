"""Prometheus metrics shared by the services (exposed at ``/metrics``).

Every metric is registered here, once. With several worker processes set ``PROMETHEUS_MULTIPROC_DIR``
(an empty directory, wiped at each start) and ``/metrics`` aggregates all workers (docs/observability.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

REQUESTS = Counter("parley_http_requests_total", "HTTP requests", ["method", "route", "status"])
REQUEST_LATENCY = Histogram(
    "parley_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
AUTH_FAILURES = Counter("parley_auth_failures_total", "Rejected credentials", ["reason"])
IDENTITY_CACHE = Counter(
    "parley_identity_cache_lookups_total",
    "Lookups of API keys and membership roles in the in-process identity cache",
    ["result"],
)
IDENTITY_INVALIDATIONS = Counter(
    "parley_identity_invalidations_total",
    "Identity changes (keys, members, organizations) dropped from the cache: made here or received",
    ["origin"],
)
ORG_CONFIG_INVALIDATIONS = Counter(
    "parley_org_config_invalidations_total",
    "Per-organization configuration changes dropped from the cache (kit/orgcache.py): made here or received",
    ["origin"],
)

DB_UNAVAILABLE = Counter(
    "parley_db_unavailable_total",
    "Requests answered 503 because the database (or storage) was unreachable, busy or timed out",
    ["error"],
)

# --- sessions and calls ------------------------------------------------------------------------------
SESSIONS_ACTIVE = Gauge(
    "parley_sessions_active",
    "Sessions with status active in the database, all organizations (refreshed when /metrics is scraped)",
    multiprocess_mode="mostrecent",
)
LIVE_CALLS = Gauge(
    "parley_live_calls",
    "Calls with a live media connection (audio WebSocket, media stream) in this process",
    ["transport"],
    multiprocess_mode="livesum",
)
DRAINING = Gauge(
    "parley_draining",
    "1 while this process drains for shutdown (refusing new sessions)",
    multiprocess_mode="livemax",
)

TURN_STAGES = (
    "engine",
    "tool",
    "llm_first_token",
    "llm_total",
    "stt_final",
    "tts_first_byte",
    "voice_to_voice",
    "hangover",
)
TURN_LATENCY = Histogram(
    "parley_turn_latency_seconds",
    "Latency of one agent turn by stage: engine (flow work), tool, llm_first_token, llm_total; voice "
    "turns add stt_final, tts_first_byte, hangover (the endpointing wait) and voice_to_voice (the caller's "
    "last voiced audio to first agent audio)",
    ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0),
)

# --- tools -------------------------------------------------------------------------------------------
TOOL_CALLS = Counter(
    "parley_tool_calls_total",
    "Tool calls by tool kind and status (ok, not_found, error, timeout)",
    ["kind", "status"],
)
TOOL_FAILURES = Counter(
    "parley_tool_call_failures_total", "Tool calls that failed (error or timeout) by tool kind", ["kind"]
)
TOOL_LATENCY = Histogram(
    "parley_tool_call_duration_seconds",
    "Tool call latency by tool kind",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


def observe_turn(latencies_ms: Mapping[str, float | None]) -> None:
    """Record a turn's stage latencies (milliseconds, as in call records; None or unknown stages skipped)."""
    for key, value in latencies_ms.items():
        stage = key.removesuffix("_ms")
        if value is not None and stage in TURN_STAGES:
            TURN_LATENCY.labels(stage).observe(max(value, 0.0) / 1000)


def observe_tool_call(kind: str, status: str, latency_ms: float) -> None:
    TOOL_CALLS.labels(kind, status).inc()
    if status in ("error", "timeout"):
        TOOL_FAILURES.labels(kind).inc()
    TOOL_LATENCY.labels(kind).observe(max(latency_ms, 0.0) / 1000)


def exposition() -> bytes:
    """The metrics in Prometheus text format: this process's, or every worker's in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)
