"""Prometheus metrics shared by the services (exposed at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter("parley_http_requests_total", "HTTP requests", ["method", "route", "status"])
REQUEST_LATENCY = Histogram(
    "parley_http_request_duration_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
AUTH_FAILURES = Counter("parley_auth_failures_total", "Rejected credentials", ["reason"])
