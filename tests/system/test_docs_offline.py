"""/docs works without internet: every asset it loads is served by Parley itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from parley.app import create_app
from parley.config import Settings
from tests import migrated
from tests.live import serve_in_thread
from tests.playground.browser import require_browser

ASSET = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


async def test_the_docs_pages_name_only_our_own_assets(client: httpx.AsyncClient) -> None:
    assert (await client.get("/redoc")).status_code == 404  # not offered: its bundle loads from a CDN
    for page in ("/docs",):
        response = await client.get(page)
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        assets = ASSET.findall(response.text)
        assert assets, f"{page} names no assets"
        for asset in assets:
            assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
            fetched = await client.get(asset)
            assert fetched.status_code == 200 and len(fetched.content) > 100, asset


async def test_the_docs_routes_stay_out_of_the_api_description(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith("/docs")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("docs")
    url = migrated.sqlite_url(data_dir / "parley.db")
    settings = Settings(data_dir=data_dir, database_url=url, log_level="WARNING", log_json=False)
    with serve_in_thread(create_app(settings)) as base_url:
        yield base_url


@pytest.mark.slow
def test_swagger_ui_renders_the_operations_with_the_network_cut_off(served: str) -> None:
    executable = require_browser()
    from playwright.sync_api import sync_playwright

    refused: list[str] = []

    def only_loopback(route: Any) -> None:
        url = route.request.url
        if url.startswith(served):
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page()
            page.route("**/*", only_loopback)
            page.goto(f"{served}/docs")
            page.get_by_text("Get API Key").first.wait_for(timeout=60_000)
        finally:
            browser.close()
    assert refused == []
