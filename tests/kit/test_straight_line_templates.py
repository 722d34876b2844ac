"""Which templates render on the event loop (kit/templates.is_straight_line): every template of the
demo flow, and none with a loop, a call, repetition, formatting or an unlisted filter."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.kit.templates import is_straight_line, render_template, render_template_async

ROOT = Path(__file__).resolve().parents[2]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _demo_flow_templates() -> list[str]:
    text = (ROOT / "docs" / "flows.md").read_text()
    match = re.search(r"```json\n(.*?)\n```", text[text.index("## Complete example") :], re.S)
    assert match is not None
    return [s for s in _strings(json.loads(match.group(1))) if "{{" in s or "{%" in s]


def test_every_template_of_the_demo_flow_is_straight_line() -> None:
    templates = _demo_flow_templates()
    assert len(templates) >= 10
    assert all(is_straight_line(t) for t in templates), [t for t in templates if not is_straight_line(t)]


@pytest.mark.parametrize(
    "template",
    [
        "{% for i in range(3) %}x{% endfor %}",
        "{{ 'ab' * 1000 }}",
        "{{ 2 ** 64 }}",
        "{{ x.upper() }}",
        "{{ '%s' % x }}",
        "{{ x | join(',') }}",
        "{{ x | center(100000) }}",
        "{{ x | replace('a', 'b') }}",
        "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
        "{{ a ~ b }}",
        "{% set a, b = 1, 2 %}",
        "{{ unclosed",
    ],
)
def test_loops_calls_repetition_and_formatting_go_to_a_thread(template: str) -> None:
    assert not is_straight_line(template)


async def test_a_straight_line_template_renders_the_same_here_as_in_a_thread() -> None:
    template = "{% set o = order %}{% if language == 'en' %}{{ o.status | upper }}{% else %}{{ o.missing | default('-') }}{% endif %}"
    variables = {"order": {"status": "ready"}, "language": "de"}
    assert is_straight_line(template)
    assert await render_template_async(template, variables) == render_template(template, variables) == "-"
