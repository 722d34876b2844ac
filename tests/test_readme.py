"""The README's and docs' commands run as printed, in order, against a live `parley up` (`make run`).

The convention for every Markdown page in README.md and docs/:

- a ```sh block is a promise: it runs as printed against the stack `make run` starts, with the
  `export` lines `make run` prints pasted (and after the README's own steps, so the user belongs to
  several organizations). The README's blocks each run whole in bash; a docs page's blocks run in order
  in one shell (a variable or file an earlier block of the page makes is there for a later one),
  in a scratch directory of the page's own.
- in a ```console block every `$ ` line runs, with the `you › ` lines of its transcript as standard
  input; `make ...` lines are skipped (this test is `make run`).
- commands that need another setting (a production host, a benchmark, a server of their own, a
  placeholder to fill in) are shown as ```text (or ```console without `$ ` lines) and are not run.

The addresses 127.0.0.1:8000/8001 are pointed at the free ports the stack runs on. curl fails on any
HTTP error, so a command that answers 4xx/5xx fails the test, just as it would fail a reader.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live import free_port

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
EXPORT = re.compile(r"^export (\w+)=(.*)$")
PRELUDE = 'set -euo pipefail\ncurl() { command curl --fail-with-body -sS "$@"; echo; }\n'


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(path.read_text())]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`parley up` on free ports, its output piped (as in `make run | tee log`); the export lines."""
    port, connector_port = free_port(), free_port()
    env = {
        **os.environ,
        "PARLEY_DATA_DIR": str(tmp_path_factory.mktemp("readme")),
        "PARLEY_OUTBOUND_ALLOWLIST": "127.0.0.1",
        "PARLEY_LOG_LEVEL": "WARNING",
    }
    command = ["up", "--port", str(port), "--connector-port", str(connector_port), "--demo-orders", "300"]
    process = subprocess.Popen(
        [sys.executable, "-m", "parley", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    exports: dict[str, str] = {}
    lines: list[str] = []
    assert process.stdout is not None
    deadline = time.monotonic() + 180
    for line in process.stdout:
        lines.append(line)
        if found := EXPORT.match(line.strip()):
            exports[found.group(1)] = found.group(2)
        if "Try:" in line or time.monotonic() > deadline:
            break
    try:
        assert {"PARLEY_URL", "TOKEN", "PARLEY_TOKEN", "KEY", "ORG", "PARLEY_ORG", "TOOL"} <= set(exports), (
            lines
        )
        wait_until_serving(port)
        yield {"process": process, "port": port, "connector_port": connector_port, "exports": exports}
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def wait_until_serving(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}/healthz"], check=False
        )
        if done.returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError("the platform did not start serving")


def run(
    stack: dict[str, Any], script: str, stdin: str = "", cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    script = script.replace("127.0.0.1:8000", f"127.0.0.1:{stack['port']}")
    script = script.replace("127.0.0.1:8001", f"127.0.0.1:{stack['connector_port']}")
    script = script.replace(".venv/bin/parley", str(Path(sys.executable).parent / "parley"))
    exports = "".join(f"export {name}={value}\n" for name, value in stack["exports"].items())
    return subprocess.run(
        ["bash", "-c", PRELUDE + exports + script],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


# Lines of a printed transcript that do not depend on the demo data: tool statuses and the outcome.
LABEL = re.compile(r"(⚙ .*|Session ended: .*)$")


def console_commands(body: str) -> list[tuple[str, str, list[str]]]:
    """The `$ ` lines of a console block, each with the `you › ` lines that follow it as its input and
    the labels its transcript promises (every `⚙ tool → status` and the `Session ended:` line)."""
    commands: list[tuple[str, list[str], list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:].split("  #")[0].strip(), [], []))
        elif line.startswith("you › ") and commands:
            commands[-1][1].append(line[len("you › ") :])
        elif (label := LABEL.search(line)) and commands:
            commands[-1][2].append(label.group(1))
    return [(command, "".join(f"{said}\n" for said in said), labels) for command, said, labels in commands]


@pytest.mark.slow
def test_every_readme_command_runs_as_printed(stack: dict[str, Any]) -> None:
    ran = 0
    for kind, body in blocks(ROOT / "README.md"):
        if kind == "sh":
            done = run(stack, body)
            assert done.returncode == 0, f"README block failed:\n{body}\n{done.stdout}\n{done.stderr}"
            ran += 1
        elif kind == "console":
            for command, stdin, labels in console_commands(body):
                if command.startswith("make "):
                    continue
                done = run(stack, command, stdin)
                assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
                assert "Session ended" in done.stdout or "parley chat" not in command, done.stdout
                printed = [
                    found.group(1) for line in done.stdout.splitlines() if (found := LABEL.search(line))
                ]
                assert printed == labels, (
                    f"{command}: the README promises {labels}, it printed:\n{done.stdout}"
                )
                ran += 1
    assert ran >= 6


DOCS = sorted((ROOT / "docs").glob("*.md"))


def test_every_docs_page_runs_as_printed(stack: dict[str, Any], tmp_path: Path) -> None:
    """After the README (a second organization exists): each page's ```sh blocks, in order, in one shell."""
    ran: list[str] = []
    for page in DOCS:
        sh = [body for kind, body in blocks(page) if kind == "sh"]
        if not sh:
            continue
        marked = "".join(f"echo '::block {n}' >&2\n{body}" for n, body in enumerate(sh))
        scratch = tmp_path / page.stem
        scratch.mkdir()
        done = run(stack, marked, cwd=scratch)
        failed = re.findall(r"::block (\d+)", done.stderr)
        where = sh[int(failed[-1])] if failed else ""
        assert done.returncode == 0, f"{page.name}: block failed:\n{where}\n{done.stdout}\n{done.stderr}"
        ran.append(page.name)
    assert {"voice.md", "knowledge.md"} <= set(ran), ran


def test_one_ctrl_c_stops_everything_make_run_started(stack: dict[str, Any]) -> None:
    process = stack["process"]
    os.killpg(process.pid, signal.SIGINT)  # what a terminal sends the whole foreground group
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    left = ["?"]
    while time.monotonic() < deadline:
        listing = subprocess.run(["ps", "-o", "pid=", "-g", str(process.pid)], capture_output=True, text=True)
        left = listing.stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert left == [], f"still running after Ctrl-C: {left}"
