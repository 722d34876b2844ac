"""The console's files: every file under static/ is served (and nothing else), and every module the
scripts import is one of them, so the page works from an installed wheel with no build step."""

from __future__ import annotations

import re
from importlib import resources

from parley.console.router import ASSETS


def test_every_static_file_is_listed_and_every_import_resolves() -> None:
    static = resources.files("parley.console").joinpath("static")
    names = {entry.name for entry in static.iterdir()}
    assert names == set(ASSETS) | {"index.html"}
    for name in ASSETS:
        if name.endswith(".js"):
            text = static.joinpath(name).read_text(encoding="utf-8")
            for imported in re.findall(r'from "\./([^"]+)"', text):
                assert imported in ASSETS, (name, imported)
    page = static.joinpath("index.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "style=" not in page and "http" not in page.replace("http-equiv", "")


def test_both_languages_have_the_same_words() -> None:
    text = resources.files("parley.console").joinpath("static", "i18n.js").read_text(encoding="utf-8")
    english, german = text.split("const de = {", 1)
    german = german.split("export const dictionaries", 1)[0]
    english = english.split("const en = {", 1)[1]
    keys = re.compile(r'(?:^\s+|, )"?([a-z][a-z0-9_.]*)"?: "', re.MULTILINE)
    assert set(keys.findall(english)) == set(keys.findall(german))
    assert len(keys.findall(english)) > 150
