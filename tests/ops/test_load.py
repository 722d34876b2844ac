"""The short version of bench/load_bench.py: 20 s of wrk against the platform (PostgreSQL + Redis) and
the connector at once. No timing assertions: zero errors, and memory not growing beyond a generous
bound (the ten-minute run and its figures are in docs/benchmarks.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bench.load_bench import stack, sustained

pytestmark = pytest.mark.postgres


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
@pytest.mark.slow
def test_sustained_load_without_errors(tmp_path: Path) -> None:
    with stack(tmp_path, 500, proxied=False, private_redis=True) as running:
        report = sustained(running, duration=20, connections=4, every=1.0)
    for part in ("platform", "connector"):
        result = report[part]
        assert result["requests"] > 0, report
        assert result["non_2xx"] == 0 and result["socket_errors"] == 0, report
        memory = result["memory"]
        assert memory["late_mb"] < memory["early_mb"] * 1.5 + 20, report
