"""The sandbox the runtime renders with, and the expression checker/evaluator."""

from __future__ import annotations

import pytest

from parley.flows.expressions import ExpressionError, evaluate, expression_problems
from parley.kit.templates import TemplateRenderError, render_template, template_problems


def test_templates_render_variables_and_missing_ones_as_empty_text() -> None:
    order = {"order": {"plate": "B-XY 123", "total_gross_cost": 1234.5}}
    text = "Kennzeichen {{ order.order.plate }}, {{ order.order.total_gross_cost }} Euro{{ missing.deep }}."
    assert render_template(text, {"order": order}) == "Kennzeichen B-XY 123, 1234.5 Euro."


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ x.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ '{0.__class__}'.format(x) }}",
        "{{ x|attr('__class__') }}",
        "{{ 'a' * 100000000 }}",
        "{{ 10 ** 100000 }}",
    ],
)
def test_sandbox_escapes_fail_at_render_time(attack: str) -> None:
    with pytest.raises(TemplateRenderError):
        render_template(attack, {"x": 1})


def test_private_attributes_are_refused_when_checking_a_template() -> None:
    assert template_problems("{{ ''.__class__ }}")
    assert template_problems("{{ x['__class__'] }}")
    assert template_problems("{{ unclosed")[0].startswith("template syntax error")
    assert template_problems("Hallo {{ name }}") == []


@pytest.mark.parametrize(
    "attack",
    [
        "__import__('os').system('id')",
        "order.__class__",
        "().__class__.__bases__[0].__subclasses__()",
        "order['__class__']",
        "open('/etc/passwd')",
        "(lambda: 1)()",
        "[x for x in order]",
        "getattr(order, 'success')",
        "_secret",
    ],
)
def test_expression_injection_is_refused(attack: str) -> None:
    assert expression_problems(attack, {"order"})
    with pytest.raises(ExpressionError):
        evaluate(attack, {"order": {"success": True}, "_secret": 1})


def test_expressions_evaluate_over_variables() -> None:
    variables = {"order": {"success": True, "items": [1, 2]}, "attempts": 1, "callback": True}
    assert evaluate("order.success and len(order.items) == 2", variables) is True
    assert evaluate("attempts + 1", variables) == 2
    assert evaluate("callback == True", variables) is True
    assert evaluate("lower('ABC') in ['abc']", variables) is True


def test_unknown_names_are_reported() -> None:
    assert expression_problems("nope > 1", {"order"}) == ["the variable 'nope' is not defined in this flow"]
    assert expression_problems("order.success and", {"order"})[0].startswith("the expression does not parse")
