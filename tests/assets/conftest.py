from __future__ import annotations

import pytest

from parley.config import Settings


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Bodies up to 30 MiB pass the global limit, so the 25 MB asset limit is what answers."""
    settings.max_body_bytes = 30 * 1024 * 1024
    return settings
