"""``GET /playground`` and its files: served from the package, with a strict Content Security Policy."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from importlib import resources

import httpx
import pytest

from parley.playground.router import ASSETS, content_security_policy


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str | None] = []
        self.links: list[str] = []
        self.inline: list[str] = []
        self.labels: set[str] = set()
        self.ids: set[str] = set()
        self.controls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name, _ in attrs:
            if name == "style" or name.startswith("on"):
                self.inline.append(f"<{tag} {name}=...>")
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "style":
            self.inline.append("<style>")
        if tag == "script":
            self.scripts.append(values.get("src"))
            self._in_script = True
        if tag == "link" and values.get("href"):
            self.links.append(str(values["href"]))
        if tag == "label" and values.get("for"):
            self.labels.add(str(values["for"]))
        if tag in ("input", "select") and values.get("type") != "checkbox" and values.get("id"):
            self.controls.append(str(values["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("inline script")


def _directives(policy: str) -> dict[str, list[str]]:
    out = {}
    for part in policy.split(";"):
        name, *values = part.split()
        out[name] = values
    return out


async def test_the_page_is_served_with_a_strict_policy(client: httpx.AsyncClient) -> None:
    response = await client.get("/playground")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    policy = _directives(response.headers["content-security-policy"])
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["connect-src"] == ["'self'", "ws://parley.test", "wss://parley.test"]
    assert policy["frame-ancestors"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert "unsafe" not in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "microphone=(self)" in response.headers["permissions-policy"]


async def test_a_strange_host_header_never_widens_the_policy(client: httpx.AsyncClient) -> None:
    response = await client.get("/playground", headers={"Host": "evil.test; script-src *"})
    policy = _directives(response.headers["content-security-policy"])
    assert policy["connect-src"] == ["'self'"] and policy["script-src"] == ["'self'"]
    assert _directives(content_security_policy("[::1]:8000"))["connect-src"][1] == "ws://[::1]:8000"


async def test_the_page_has_no_inline_code_and_every_file_it_names_is_served(
    client: httpx.AsyncClient,
) -> None:
    page = _Page()
    page.feed((await client.get("/playground")).text)
    assert page.inline == []
    assert page.scripts and all(src and src.startswith("/playground/") for src in page.scripts)
    static = resources.files("parley.playground").joinpath("static")
    script = static.joinpath("playground.js").read_text()
    voice = static.joinpath("voice.js").read_text()  # the audio side, shared with the operator console
    modules = re.findall(r'addModule\("(/playground/[^"]+)"\)', voice)
    assert modules == ["/playground/pcm.js", "/playground/capture-worklet.js"]
    imported = [
        f"/playground/{name}" for name in re.findall(r'(?:from |import )"\./([^"]+)"', script + voice)
    ]
    assert set(imported) == {"/playground/voice.js", "/playground/pcm.js"}
    named = [s for s in page.scripts if s] + [h for h in page.links if h.startswith("/")] + modules + imported
    for path in named:
        response = await client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == ASSETS[path.rsplit("/", 1)[1]]
        assert response.headers["x-content-type-options"] == "nosniff"
    # every element the script looks up exists, and every text control has a label
    for element in set(re.findall(r'\$\("([a-z-]+)"\)', script)):
        assert element in page.ids, element
    assert set(page.controls) <= page.labels


@pytest.mark.parametrize("name", ["index.html", "nope.js", "..%2Fapp.py", "%2E%2E%2Fconfig.py"])
async def test_only_the_listed_files_are_served(client: httpx.AsyncClient, name: str) -> None:
    response = await client.get(f"/playground/{name}")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_the_files_ship_in_the_package() -> None:
    static = resources.files("parley.playground").joinpath("static")
    for name in [*ASSETS, "index.html"]:
        assert static.joinpath(name).is_file(), name
