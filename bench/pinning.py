"""The local PostgreSQL server's processes on one core during a benchmark, as a database on a host of
its own would be: its work does not land on the core of the server being measured."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


def postgres_processes() -> list[int]:
    """The local PostgreSQL server's processes (postmaster first), by their command name."""
    found = subprocess.run(["pgrep", "-x", "postgres"], capture_output=True, text=True).stdout.split()
    return sorted(int(pid) for pid in found)


@contextlib.contextmanager
def postgres_on(core: int) -> Iterator[list[int]]:
    """Move the server's processes to ``core`` (the postmaster's new backends inherit it) and give them
    every core back afterwards."""
    moved = postgres_processes()
    for pid in moved:
        with contextlib.suppress(OSError):  # a backend that has ended meanwhile
            os.sched_setaffinity(pid, {core})
    try:
        yield moved
    finally:
        for pid in postgres_processes():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(pid, range(os.cpu_count() or 1))
