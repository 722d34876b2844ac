"""The ops tests log as production does: JSON lines with tracebacks as text.

The development console renderer pretty-prints exceptions with their local variables, which, for a
server thread hit by many failing requests at once, can take long enough to look like a hang.
"""

from __future__ import annotations

import pytest

from parley.kit.logging import configure_logging


@pytest.fixture(scope="module", autouse=True)
def _production_logging() -> None:
    configure_logging("WARNING", json=True)
