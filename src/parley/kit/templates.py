"""Text templates (Jinja2 in a sandbox), shared by flows, tools and the runtime.

Templates are rendered by :func:`render_template` in Jinja2's ``SandboxedEnvironment``. Private and
internal attributes (``''.__class__``, ``x.__init__.__globals__``, ``'{0.__class__}'.format(x)``) raise
at render time instead of quietly rendering nothing, string repetition and powers are bounded, and
missing variables render as empty text (a caller should never hear a stack trace).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

MAX_TEMPLATE_OUTPUT = 20_000
_MAX_REPEAT = 10_000
_MAX_EXPONENT = 100


class TemplateRenderError(Exception):
    """A template could not be rendered safely; the message is safe to show."""


class _FlowEnvironment(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # The stock sandbox returns an undefined that renders as empty text; refuse loudly instead.
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, int | float) and abs(right) > _MAX_EXPONENT:
                raise SecurityError("the exponent is too large")
            return operator.pow(left, right)
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(count, int) and count > _MAX_REPEAT:
                raise SecurityError("the repetition is too large")
        return operator.mul(left, right)


_ENV = _FlowEnvironment(undefined=ChainableUndefined, autoescape=False, keep_trailing_newline=True)


def parse_template(text: str) -> nodes.Template:
    """Parse ``text``; raise ``TemplateRenderError`` with a readable reason when it is not a template."""
    try:
        return _ENV.parse(text)
    except TemplateError as exc:
        raise TemplateRenderError(f"template syntax error: {exc.message}") from exc


def template_problems(text: str) -> list[str]:
    """Why ``text`` is not an acceptable template (syntax, private attributes); empty when fine."""
    try:
        tree = parse_template(text)
    except TemplateRenderError as exc:
        return [str(exc)]
    problems = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else _const(getattr(node, "arg", None))
        if isinstance(name, str) and name.startswith("_"):
            problems.append(f"refers to the private attribute {name!r}, which templates may not use")
    return problems


def _const(node: nodes.Node | None) -> Any:
    return node.value if isinstance(node, nodes.Const) else None


def template_variables(text: str) -> set[str]:
    """The top-level variable names a template reads (empty when it does not parse)."""
    from jinja2 import meta

    try:
        names = set(meta.find_undeclared_variables(parse_template(text)))
    except TemplateRenderError:
        return set()
    return names - set(_ENV.globals)


def render_template(text: str, variables: Mapping[str, Any]) -> str:
    """Render ``text`` with ``variables`` in the sandbox; raise ``TemplateRenderError`` on any failure."""
    try:
        template = _ENV.from_string(text)
        rendered = template.render(dict(variables))
    except SecurityError as exc:
        raise TemplateRenderError(f"the template was refused by the sandbox: {exc}") from exc
    except TemplateError as exc:
        raise TemplateRenderError(f"the template cannot be rendered: {exc.message}") from exc
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        raise TemplateRenderError(f"the template cannot be rendered ({type(exc).__name__})") from exc
    if len(rendered) > MAX_TEMPLATE_OUTPUT:
        raise TemplateRenderError(f"the rendered text is longer than {MAX_TEMPLATE_OUTPUT} characters")
    return rendered
