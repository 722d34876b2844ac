"""``parley connector`` commands through Typer's runner, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley.connector.cli import app
from tests import pg
from tests.connector.conftest import fresh_database

runner = CliRunner()


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp(f"cli-{request.param}")
    url, cleanup = fresh_database(request.param, tmp)
    try:
        yield {"PARLEY_DATA_DIR": str(tmp), "PARLEY_CONNECTOR_DATABASE_URL": url}
    finally:
        cleanup()


def test_keys_create_prints_the_key_alone_on_stdout(env: dict[str, str]) -> None:
    result = runner.invoke(app, ["keys", "create", "--name", "voice-agent"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcn_") and len(lines[0]) > 50
    assert "shown only this once" in result.stderr

    listed = runner.invoke(app, ["keys", "list"], env=env)
    assert listed.exit_code == 0
    assert "voice-agent" in listed.stdout and "active" in listed.stdout
    # pcn_<key id>_<secret>: the secret (token_urlsafe, which may itself contain "_") is never listed.
    secret = lines[0].split("_", 2)[2]
    assert lines[0] not in listed.stdout and secret not in listed.stdout

    again = runner.invoke(app, ["keys", "create", "--name", "voice-agent"], env=env)
    assert again.exit_code == 1
    assert "An active key named 'voice-agent' exists" in again.stderr

    assert runner.invoke(app, ["keys", "revoke", "voice-agent"], env=env).exit_code == 0
    assert "revoked" in runner.invoke(app, ["keys", "list"], env=env).stdout
    gone = runner.invoke(app, ["keys", "revoke", "voice-agent"], env=env)
    assert gone.exit_code == 1 and "No active key named 'voice-agent'" in gone.stderr
    # The name is free again once revoked.
    assert runner.invoke(app, ["keys", "create", "--name", "voice-agent"], env=env).exit_code == 0


def test_bad_key_names_are_refused(env: dict[str, str]) -> None:
    for name in ("", "has space", "-dash", "x" * 101):
        result = runner.invoke(app, ["keys", "create", "--name", name], env=env)
        assert result.exit_code == 1 and "key name" in result.stderr
        assert "Traceback" not in result.output


def test_demo_and_import(env: dict[str, str], tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["demo", "--count", "50", "--seed", "9", "--reference-date", "2025-01-15"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "Wrote 50 demo order(s) (ids 1..50)" in result.stdout

    path = tmp_path / "orders.jsonl"
    from parley.connector.demo import generate_orders

    rows = list(generate_orders(3, seed=1, start_id=49))
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n", encoding="utf-8")
    failed = runner.invoke(app, ["import", str(path)], env=env)
    assert failed.exit_code == 1
    assert "line 4: invalid JSON" in failed.stderr and "nothing was imported" in failed.stderr
    assert "Traceback" not in failed.output

    ok = runner.invoke(app, ["import", str(path), "--skip-invalid"], env=env)
    assert ok.exit_code == 0, ok.output
    assert "Imported 3 order(s): 1 new, 2 updated, 1 invalid skipped." in ok.stdout


def test_import_usage_errors(env: dict[str, str], tmp_path: Path) -> None:
    missing = runner.invoke(app, ["import", str(tmp_path / "nope.csv")], env=env)
    assert missing.exit_code == 1 and "No such file" in missing.stderr
    odd = tmp_path / "orders.xml"
    odd.write_text("<orders/>")
    result = runner.invoke(app, ["import", str(odd)], env=env)
    assert result.exit_code == 1 and "--format" in result.stderr
    result = runner.invoke(app, ["import", str(odd), "--format", "json"], env=env)
    assert result.exit_code == 1 and "array of order objects" in result.stderr


def test_db_upgrade_is_idempotent(env: dict[str, str]) -> None:
    for _ in range(2):
        result = runner.invoke(app, ["db", "upgrade"], env=env)
        assert result.exit_code == 0 and "up to date" in result.stdout


def test_bad_configuration_is_one_clear_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["db", "upgrade"], env={"PARLEY_CONNECTOR_DATABASE_URL": "mysql://x/y"})
    assert result.exit_code == 2
    assert "SQLite or PostgreSQL" in result.stderr and "Traceback" not in result.output
    result = runner.invoke(app, ["keys", "list"], env={"PARLEY_CONNECTOR_RATE_LIMIT": "lots"})
    assert result.exit_code == 2 and "PARLEY_CONNECTOR_RATE_LIMIT" in result.stderr


def test_help_texts() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "import", "demo", "keys", "db"):
        assert command in result.stdout
    serve = runner.invoke(app, ["serve", "--help"])
    assert "--workers" in serve.stdout and "--port" in serve.stdout
