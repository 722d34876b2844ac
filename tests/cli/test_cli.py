"""The ``parley`` command through its real entry point (a subprocess, like a user runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jwt
import pytest


def run(args: list[str], data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    environment.update({"PARLEY_DATA_DIR": str(data_dir), **env})
    return subprocess.run(
        [sys.executable, "-m", "parley", *args], capture_output=True, text=True, env=environment, timeout=120
    )


def test_help_explains_every_command(tmp_path: Path) -> None:
    result = run(["--help"], tmp_path)
    assert result.returncode == 0
    for command in ("up", "serve", "connector", "db", "token"):
        assert command in result.stdout


# Runs `parley ARGS` in a fresh interpreter, then reports on stderr whether the connector's commands
# (parley.connector.cli) were imported.
CONNECTOR_PROBE = """
import sys
from parley.cli import app
try:
    app(sys.argv[1:], prog_name="parley")
except SystemExit:
    pass
print("connector-cli-imported:", "parley.connector.cli" in sys.modules, file=sys.stderr)
"""


def probe(args: list[str], data_dir: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    environment["PARLEY_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-c", CONNECTOR_PROBE, *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )


def test_the_connector_commands_are_imported_only_when_named(tmp_path: Path) -> None:
    """`parley connector` is listed with its help, but only a command line naming it imports its commands."""
    listed = probe(["--help"], tmp_path)
    assert "The order connector: a separate service answering GET" in listed.stdout
    assert listed.stderr.endswith("connector-cli-imported: False\n"), listed.stderr

    token = probe(["token", "create", "--sub", "alice", "--ttl", "600"], tmp_path)
    assert token.stdout.count(".") == 2, token.stderr  # a JWT
    assert token.stderr.endswith("connector-cli-imported: False\n"), token.stderr

    named = probe(["connector", "keys", "--help"], tmp_path)
    assert "Create, list and revoke connector API keys." in named.stdout
    for command in ("create", "list", "revoke"):
        assert command in named.stdout
    assert named.stderr.endswith("connector-cli-imported: True\n"), named.stderr


@pytest.mark.slow
def test_db_upgrade_current_and_token(tmp_path: Path) -> None:
    assert run(["db", "upgrade"], tmp_path).returncode == 0
    assert "(head)" in run(["db", "current"], tmp_path).stdout
    # First run generated the secrets, private to the owner.
    secret_file = tmp_path / "jwt_secret"
    assert secret_file.stat().st_mode & 0o077 == 0
    assert (tmp_path / "secret_key").exists()

    result = run(
        ["token", "create", "--sub", "alice", "--email", "a@example.com", "--admin", "--ttl", "600"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    claims = jwt.decode(token, secret_file.read_text().strip(), algorithms=["HS256"])
    assert claims["sub"] == "alice" and claims["roles"] == ["platform_admin"]
    assert claims["exp"] - claims["iat"] == 600


@pytest.mark.slow
def test_token_create_stays_within_the_maximum_token_lifetime(tmp_path: Path) -> None:
    env = {"PARLEY_AUTH_MAX_TOKEN_LIFETIME_SECONDS": "3600"}
    refused = run(["token", "create", "--sub", "alice", "--ttl", "3601"], tmp_path, **env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert (
        "maximum token lifetime" in refused.stderr
        and "PARLEY_AUTH_MAX_TOKEN_LIFETIME_SECONDS" in refused.stderr
    )
    made = run(["token", "create", "--sub", "alice", "--ttl", "3600"], tmp_path, **env)
    assert made.returncode == 0, made.stderr


@pytest.mark.slow
def test_bad_configuration_is_one_clear_sentence(tmp_path: Path) -> None:
    cases = [
        ({"PARLEY_DATABASE_URL": "mysql://db/x"}, "PARLEY_DATABASE_URL"),
        ({"PARLEY_AUTH_JWT_SECRET": "short"}, "PARLEY_AUTH_JWT_SECRET"),
        ({"PARLEY_SECRET_KEY": "not-a-key"}, "PARLEY_SECRET_KEY"),
        ({"PARLEY_PORT": "seventy"}, "port"),
        ({"PARLEY_OUTBOUND_ALLOWLIST": "10.0.0.0/99"}, "PARLEY_OUTBOUND_ALLOWLIST"),
        (
            {"PARLEY_AUTH_JWKS_URL": "https://idp.test/jwks", "PARLEY_AUTH_ISSUER": "https://idp.test/"},
            "AUDIENCE",
        ),
    ]
    for env, fragment in cases:
        result = run(["db", "current"], tmp_path, **env)
        assert result.returncode == 2, (env, result.stderr)
        assert "Configuration error" in result.stderr
        assert fragment in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    result = run(["serve", "--port", "1"], tmp_path)
    assert result.returncode == 2
    assert "parley db upgrade" in result.stderr


@pytest.mark.slow
def test_unreachable_database_is_one_clear_sentence(tmp_path: Path) -> None:
    for url, fragment in [
        ("postgresql+asyncpg://postgres@127.0.0.1:1/x", "Connect call failed"),
        ("postgresql+asyncpg://postgres:hunter2@127.0.0.1:5432/parley_no_such_db", "does not exist"),
    ]:
        for command in (["db", "upgrade"], ["serve", "--port", "1"]):
            result = run(command, tmp_path, PARLEY_DATABASE_URL=url)
            assert result.returncode == 2, result.stderr
            assert "cannot be used" in result.stderr and fragment in result.stderr
            assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
