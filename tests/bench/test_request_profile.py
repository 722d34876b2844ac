"""bench/request_profile.py runs as docs/benchmarks.md prints it: the CPU per request, and the shares of
a py-spy raw profile (a small raw file written here stands in for py-spy, which is not a dependency)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a bench subprocess: about 20 s
def test_the_profile_measures_the_request_in_process() -> None:
    result = subprocess.run(
        [sys.executable, "bench/request_profile.py", "--requests", "50"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "50 requests:" in result.stdout and "µs CPU per request" in result.stdout


def test_shares_attribute_each_sample_to_the_innermost_part(tmp_path: Path) -> None:
    request = "main (bench/request_profile.py:150);send_request (bench/request_profile.py:120)"
    raw = tmp_path / "request.raw"
    raw.write_text(
        f"{request};solve_dependencies (fastapi/dependencies/utils.py:700) 3\n"
        f"{request};solve_dependencies (fastapi/dependencies/utils.py:762);"
        "_principal (parley/auth/dependencies.py:81) 1\n"
        "<module> (parley/app.py:1);_find_and_load (<frozen importlib._bootstrap>:1176) 50\n"
    )
    result = subprocess.run(
        [sys.executable, "bench/request_profile.py", "--shares", str(raw)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "4 samples while a request ran" in result.stdout
    assert "| FastAPI dependency solving | 75.0 % |" in result.stdout
    assert "| identity (auth/) | 25.0 % |" in result.stdout
