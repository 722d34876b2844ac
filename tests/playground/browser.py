"""Finding a Chromium for the browser tests: Debian's package (``make test`` installs it as root); and
starving its pages' processes of CPU on purpose, as a busy machine does."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    explicit = os.environ.get("PARLEY_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def require_browser() -> str:
    """Chromium's path; without one (or without playwright) a skip, but a failure when CI=true."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -e '.[test]')")
    path = chromium_path()
    if path is None:
        missing.append("Chromium (apt-get install chromium, or PARLEY_CHROMIUM=/path/to/chrome)")
    if missing:
        reason = "browser tests need " + " and ".join(missing)
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason + " (CI=true: not skipped)")
        pytest.skip(reason)
    assert path is not None
    return path


def renderers() -> list[int]:
    """The process ids of the Chromium renderers (the pages' processes) this test process started."""
    parents: dict[int, int] = {}
    pages: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        if b"--type=renderer" in command:
            pages.append(pid)

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [pid for pid in pages if ours(pid)]


@contextlib.contextmanager
def starved(
    pids: list[int], start_s: float, end_s: float, stop_s: float = 0.15, run_s: float = 0.1
) -> Iterator[None]:
    """What a busy machine does to a page, on purpose: from ``start_s`` to ``end_s`` (seconds from now)
    the processes get no CPU for ``stop_s`` out of every ``stop_s + run_s`` (SIGSTOP, then SIGCONT)."""
    done = threading.Event()

    def starve() -> None:
        if done.wait(start_s):
            return
        until = time.monotonic() + end_s - start_s
        while time.monotonic() < until and not done.is_set():
            _signal(pids, signal.SIGSTOP)
            try:
                done.wait(stop_s)
            finally:
                _signal(pids, signal.SIGCONT)
            done.wait(run_s)

    thread = threading.Thread(target=starve, name="starve-renderers", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        _signal(pids, signal.SIGCONT)


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
