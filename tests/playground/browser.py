"""Finding a Chromium for the browser tests: Debian's package (``make test`` installs it as root)."""

from __future__ import annotations

import importlib.util
import os
import shutil

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
