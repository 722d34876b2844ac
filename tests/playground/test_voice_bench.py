"""bench/voice_bench.py runs (tiny numbers; the figures themselves are never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_voice_bench_runs_end_to_end() -> None:
    args = ["--trials", "1", "--turns", "5", "--sessions", "2", "--seconds", "1", "--offline-sessions", "1"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "voice_bench.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for heading in (
        "## 1. Voice to voice",
        "## 2. Pipeline overhead",
        "## 3. Voiced sessions",
        "## 4. Offline",
    ):
        assert heading in out, out
    # the offline engines heard the spoken order number in the voice-to-voice trial
    offline = next(line for line in out.splitlines() if line.startswith("| offline"))
    assert offline.rstrip().endswith("| 1/1 |"), offline
    assert "| pipeline, fake engines | 2 |" in out
