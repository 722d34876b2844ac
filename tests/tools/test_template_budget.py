"""Hostile templates (issue 18): refused at save time when they cannot render within the budget, and
bounded at run time, while /healthz and another organization keep being answered."""

from __future__ import annotations

import httpx
import pytest

from parley.kit.templates import TemplateRenderError, render_template
from tests.flows.example import node, order_flow
from tests.flows.test_router import create_flow
from tests.tools.test_router import http_tool

NESTED_RANGES = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
ATTACKS = {
    "nested range loops": NESTED_RANGES,
    "a 100 MB string from 40 bytes": '{{ (("x"*10000)*10000)|length }}',
    "doubling a string in a loop": (
        '{% set ns = namespace(s="x") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}'
    ),
    "padding to a huge width": '{{ "x"|center(100000000) }}',
    "a huge format width": '{{ "{:>99999999}".format(1) }}',
    "a huge separator": '{{ range(100000)|join("x" * 10000) }}',
    "exponential macro recursion": "{% macro f() %}{{ f() }}{{ f() }}{% endmacro %}{{ f() }}",
    "one long text printed many times": '{% set s = "x" * 1000000 %}{{ [[s]] * 100000 }}',
    "one long text joined many times": '{% set s = "x" * 1000000 %}{{ ",".join([s] * 100000) }}',
}


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
async def test_a_tool_whose_template_exceeds_the_budget_is_refused_when_saved(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str, attack: str
) -> None:
    response = await allow_client.post(
        "/api/tools", json=http_tool(f"{stub_url}/echo/{attack}"), headers=headers
    )
    assert response.status_code == 422, response.text
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", "config", "url"]
    assert "template budget" in error["msg"] or "recurses" in error["msg"], error


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
async def test_a_flow_whose_say_node_exceeds_the_budget_is_refused_when_saved(
    allow_client: httpx.AsyncClient, headers: dict[str, str], attack: str
) -> None:
    definition = order_flow()
    node(definition, "greet")["text"] = attack
    response = await create_flow(allow_client, headers, definition)
    assert response.status_code == 422, response.text
    errors = [
        e for e in response.json()["detail"] if e["loc"] == ["body", "definition", "nodes", "greet", "text"]
    ]
    assert errors and "template budget" in errors[0]["msg"], response.json()


async def test_a_syntax_error_is_refused_with_a_sentence(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    response = await allow_client.post(
        "/api/tools", json=http_tool(f"{stub_url}/echo/{{% for x in y %}}"), headers=headers
    )
    assert response.status_code == 422
    assert "template syntax error" in response.json()["detail"][0]["msg"]


def test_the_sandbox_is_immutable() -> None:
    order = {"status": "open", "lines": [1]}
    for attack in (
        "{{ order.update({'status': 'paid'}) }}",
        "{{ order.lines.append(2) }}",
        "{{ order.clear() }}",
    ):
        with pytest.raises(TemplateRenderError, match="unsafe"):
            render_template(attack, {"order": order})
    assert order == {"status": "open", "lines": [1]}


def test_ordinary_templates_still_render() -> None:
    text = (
        "{% for l in order.lines %}{{ loop.index }}:{{ l.price }} {% endfor %}{{ 'a' ~ 'b' }} {{ 3 * 4 }} "
        "{{ names|join(', ') }} {{ '%s-%d' % ('a', 3) }} {{ '{} {}'.format(1, 'x') }} {{ range(1000)|sum }}"
    )
    variables = {"order": {"lines": [{"price": 1}, {"price": 2}]}, "names": ["Ada", "Bob"]}
    assert render_template(text, variables) == "1:1 2:2 ab 12 Ada, Bob a-3 1 x 499500"


async def test_many_templates_under_the_budget_cannot_add_up(
    allow_client: httpx.AsyncClient, headers: dict[str, str], stub_url: str
) -> None:
    # Each header stays under the per-render budget; together they would cost 20 budgets to check.
    busy = "{% for i in range(15000) %}{% endfor %}x"
    body = http_tool(f"{stub_url}/echo/x")
    body["config"]["headers"] = {f"X-H{i}": busy for i in range(20)}
    response = await allow_client.post("/api/tools", json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert any("templates together" in e["msg"] for e in response.json()["detail"]), response.json()
    # One such header alone is fine.
    body["config"]["headers"] = {"X-H0": busy}
    assert (await allow_client.post("/api/tools", json=body, headers=headers)).status_code == 200
