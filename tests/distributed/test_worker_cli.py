"""``parley worker`` refuses what it cannot work with, in one sentence (a subprocess, as users run it)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import run


def test_worker_needs_redis(tmp_path: Path) -> None:
    result = run(["worker"], tmp_path)
    assert result.returncode == 2
    assert "PARLEY_REDIS_URL is not set" in result.stderr and "Traceback" not in result.stderr


def test_worker_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    result = run(["worker"], tmp_path, PARLEY_REDIS_URL="redis://127.0.0.1:6379/9")
    assert result.returncode == 2
    assert "parley db upgrade" in result.stderr


def test_a_bad_redis_url_is_one_sentence_without_the_password(tmp_path: Path) -> None:
    result = run(["worker"], tmp_path, PARLEY_REDIS_URL="http://:hunter2@cache:6379/0")
    assert result.returncode == 2
    assert "PARLEY_REDIS_URL must start with redis:// or rediss://" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_help_names_the_worker(tmp_path: Path) -> None:
    result = run(["worker", "--help"], tmp_path)
    assert result.returncode == 0
    assert "--concurrency" in result.stdout and "--grace" in result.stdout
