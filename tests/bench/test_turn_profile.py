"""bench/turn_profile.py runs as docs/benchmarks.md prints it: conversations against a real connector,
the CPU per request, and the inclusive shares of a py-spy raw profile (a small raw file stands in for
py-spy, which is not a dependency)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_profile_runs_whole_conversations_in_process() -> None:
    result = subprocess.run(
        [sys.executable, "bench/turn_profile.py", "--conversations", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "5 conversations (20 requests):" in result.stdout and "ms CPU per request" in result.stdout


def test_shares_count_each_function_once_per_sample(tmp_path: Path) -> None:
    request = "main (bench/turn_profile.py:200);send_request (bench/turn_profile.py:90)"
    raw = tmp_path / "turn.raw"
    raw.write_text(
        f"{request};send_message (parley/sessions/service.py:10);_save (parley/sessions/service.py:20) 3\n"
        f"{request};send_message (parley/sessions/service.py:12) 1\n"
        "<module> (parley/app.py:1);_find_and_load (<frozen importlib._bootstrap>:1176) 50\n"
    )
    result = subprocess.run(
        [sys.executable, "bench/turn_profile.py", "--shares", str(raw)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "4 samples while a request ran" in result.stdout
    assert "| send_message (parley/sessions/service.py | 100.0 % |" in result.stdout
    assert "| _save (parley/sessions/service.py | 75.0 % |" in result.stdout
