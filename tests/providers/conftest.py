from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.config import Settings
from tests.live import serve_in_thread
from tests.providers.stubs import smtp_server, stub_app


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The providers' stubs listen on loopback, which outbound calls may reach only when allow-listed."""
    settings.outbound_allowlist = ["127.0.0.1"]
    settings.outbound_timeout = 5.0
    return settings


@pytest.fixture(scope="session")
def stub_url() -> Iterator[str]:
    with serve_in_thread(stub_app) as url:
        yield url


@pytest.fixture(scope="session")
def smtp_port() -> Iterator[int]:
    with smtp_server() as port:
        yield port
