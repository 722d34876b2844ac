"""Text templates (Jinja2 in a sandbox), shared by flows, tools and the runtime.

Templates are rendered by :func:`render_template` in Jinja2's ``ImmutableSandboxedEnvironment``: private
and internal attributes (``''.__class__``, ``'{0.__class__}'.format(x)``) raise at render time instead of
quietly rendering nothing, lists and dicts cannot be changed (``{{ order.update(...) }}`` is refused), and
missing variables render as empty text (a caller should never hear a stack trace).

Every render has a budget (see docs/security.md): at most ``MAX_OPERATIONS`` loop iterations, calls and
filters together, no intermediate string or list longer than ``MAX_INTERMEDIATE``, integers of at most
``MAX_INT_BITS`` bits, and a wall-clock deadline of ``RENDER_DEADLINE_SECONDS``. The budget is enforced
inside rendering: loops are rewritten to count their iterations, and concatenation, repetition,
filters and method calls check sizes *before* they allocate. :func:`render_template_async` renders in a
worker thread so the event loop never waits for a template, unless the template is straight-line
(:func:`is_straight_line`: no loops, calls, repetition or formatting), which costs less than the hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import ChainableUndefined, Environment, Template, TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

MAX_TEMPLATE_OUTPUT = 20_000
MAX_OPERATIONS = 20_000
MAX_INTERMEDIATE = 1_000_000
MAX_ALLOCATED = 10_000_000
MAX_INT_BITS = 4096
RENDER_DEADLINE_SECONDS = 0.5
_MAX_EXPONENT = 100
# A width of a million or more in a format spec ("{:>99999999}", "%99999999s") would allocate it at once.
_WIDE_FORMAT = re.compile(r"[0-9]{7,}")


class TemplateRenderError(Exception):
    """A template could not be rendered safely; the message is safe to show."""


class TemplateBudgetExceeded(TemplateRenderError):
    """The render needed more work, memory or time than a template may use."""


@dataclass
class _Budget:
    operations: int
    deadline: float
    allocated: int = 0
    # The trial renders of one save share a budget too, so ten thousand templates cannot add up.
    parent: _Budget | None = None

    def produce(self, size: int) -> None:
        self.allocated += size
        if self.allocated > MAX_ALLOCATED:
            raise TemplateBudgetExceeded(
                f"the template builds more than {MAX_ALLOCATED} characters or items in total"
            )

    def tick(self, count: int = 1) -> None:
        if self.parent is not None:
            self.parent.tick(count)
        self.operations -= count
        if self.operations < 0:
            if self.deadline == float("inf"):
                raise TemplateBudgetExceeded(
                    f"the templates together need more than {MAX_CHECK_OPERATIONS} loop iterations, "
                    "calls and filters to check"
                )
            raise TemplateBudgetExceeded(
                f"the template needs more than {MAX_OPERATIONS} loop iterations, calls and filters"
            )
        if time.monotonic() > self.deadline:
            raise TemplateBudgetExceeded(f"the template did not finish within {RENDER_DEADLINE_SECONDS:g} s")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("template_budget", default=None)
_CHECK_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("template_check", default=None)
MAX_CHECK_OPERATIONS = 200_000


def _tick(count: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.tick(count)


def _size(value: Any) -> int:
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset | range):
        return len(value)
    return 0


def _produced(value: Any, what: str) -> None:
    """Count a new value against the budget: its own size, and the total built by the render."""
    size = _size(value)
    _check_size(size, what)
    _check_int(value)
    budget = _BUDGET.get()
    if budget is not None and size:
        budget.produce(size)


def _check_size(size: int, what: str) -> None:
    if size > MAX_INTERMEDIATE:
        raise TemplateBudgetExceeded(f"{what} would be longer than {MAX_INTERMEDIATE} items or characters")


def _check_int(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise TemplateBudgetExceeded(f"a number in the template is larger than {MAX_INT_BITS} bits")


def _deep_size(value: Any, limit: int = MAX_INTERMEDIATE) -> int:
    """Characters and items inside ``value``, counting shared references each time (as ``str()`` would
    write them); stops early once over ``limit``, so the walk itself stays bounded."""
    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item) + 1
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item) + 1
            stack.extend(item)
        else:
            total += 1
    return total


def _finalize(value: Any) -> Any:
    # What ``{{ x }}`` prints: a list holding one long text many times is refused before str() writes it.
    if isinstance(value, list | tuple | dict | set | frozenset):
        _check_size(_deep_size(value), "the printed value")
    return value


def _check_arguments(target: Any, args: Iterable[Any]) -> None:
    """Refuse a call whose arguments could make it allocate more than the budget (widths, padding)."""
    base = max(_size(target), 1)
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool):
            _check_size(abs(arg), "a width or count")
            _check_size(base * abs(arg), "the result")
        elif isinstance(arg, str):
            if _WIDE_FORMAT.search(arg):
                raise TemplateBudgetExceeded("a width in a format string is too large")
            _check_size(base * max(len(arg), 1), "the result")
        elif isinstance(arg, list | tuple):  # "".join(items) and the like
            _check_size(_deep_size(arg) + base * len(arg), "the result")
    if isinstance(target, str) and _WIDE_FORMAT.search(target):
        raise TemplateBudgetExceeded("a width in a format string is too large")


# What Jinja passes to context, eval-context and environment filters before the value.
_PASSED_FIRST = (Context, EvalContext, Environment)


def _budgeted_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*given: Any, **kwargs: Any) -> Any:
        _tick()
        # Filters get (value, ...) or (context/environment, value, ...); the value is the first other one.
        args = list(given)
        index = next((i for i, a in enumerate(args) if not isinstance(a, _PASSED_FIRST)), None)
        if index is not None:
            value = args[index]
            if isinstance(value, Iterator):
                # Generators (from map, select...) are counted like lists: materialise, item by item.
                value = args[index] = list(_FlowEnvironment.budget_iterate(value))
            extra = [*args[index + 1 :], *kwargs.values()]
            _check_arguments(value, extra)
            if name == "join" and isinstance(value, list | tuple):
                separator = next((a for a in extra if isinstance(a, str)), "")
                total = sum(len(v) if isinstance(v, str) else 24 for v in value)
                _check_size(total + len(separator) * len(value), "the joined text")
        result = function(*args, **kwargs)
        _produced(result, f"the result of the filter {name!r}")
        return result

    return wrapper


class _BudgetTransformer(NodeTransformer):
    """Wrap every loop's iterable and every ``~`` concatenation in budget-checking helpers."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(
            nodes.EnvironmentAttribute("budget_iterate"), [node.iter], [], None, None, lineno=node.lineno
        )
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(
            nodes.EnvironmentAttribute("budget_concat"), list(node.nodes), [], None, None, lineno=node.lineno
        )


class _FlowEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.filters = {name: _budgeted_filter(name, f) for name, f in self.filters.items()}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        transformed = _BudgetTransformer().visit(tree)
        assert isinstance(transformed, nodes.Template)
        return transformed

    @staticmethod
    def budget_iterate(iterable: Any) -> Iterator[Any]:
        _tick()
        for item in iterable:
            _tick()
            yield item

    @staticmethod
    def budget_concat(*parts: Any) -> str:
        _tick()
        texts = [str(part) for part in parts]
        _check_size(sum(len(t) for t in texts), "a joined text")
        joined = "".join(texts)
        _produced(joined, "a joined text")
        return joined

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # The stock sandbox returns an undefined that renders as empty text; refuse loudly instead.
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe.")

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _tick()
        # The sandbox wraps str.format; the string it formats is on the wrapped method.
        target = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        _check_arguments(target, [*args, *kwargs.values()])
        result = super().call(__context, __obj, *args, **kwargs)
        _produced(result, "the result of a call")
        return result

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        _tick()
        if operator_name == "**":
            if isinstance(right, int | float) and abs(right) > _MAX_EXPONENT:
                raise SecurityError("the exponent is too large")
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() * right > MAX_INT_BITS:
                raise TemplateBudgetExceeded(f"the power is larger than {MAX_INT_BITS} bits")
            return operator.pow(left, right)
        if operator_name == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(count, int):
                    size = len(seq) if isinstance(seq, str) else _deep_size(seq)
                    _check_size(max(size, 1) * count, "a repeated text or list")
            both_ints = isinstance(left, int) and isinstance(right, int)
            if both_ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateBudgetExceeded(f"the product is larger than {MAX_INT_BITS} bits")
            result = operator.mul(left, right)
            _produced(result, "a repeated text or list")
            return result
        if operator_name == "%":
            if isinstance(left, str):
                _check_arguments(left, right if isinstance(right, tuple) else [right])
            result = operator.mod(left, right)
            _produced(result, "a formatted text")
            return result
        _check_size(_deep_size(left) + _deep_size(right), "a sum of texts or lists")
        result = operator.add(left, right)
        _produced(result, "a sum of texts or lists")
        return result


_ENV = _FlowEnvironment(
    undefined=ChainableUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize
)


def parse_template(text: str) -> nodes.Template:
    """Parse ``text``; raise ``TemplateRenderError`` with a readable reason when it is not a template."""
    try:
        return _ENV.parse(text)
    except TemplateError as exc:
        raise TemplateRenderError(f"template syntax error: {exc.message}") from exc


def template_problems(text: str) -> list[str]:
    """Why ``text`` is not an acceptable template (syntax, private attributes, budget); empty when fine."""
    try:
        tree = parse_template(text)
    except TemplateRenderError as exc:
        return [str(exc)]
    problems = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        name = node.attr if isinstance(node, nodes.Getattr) else _const(getattr(node, "arg", None))
        if isinstance(name, str) and name.startswith("_"):
            problems.append(f"refers to the private attribute {name!r}, which templates may not use")
    if not problems:
        # A trial render without variables: what exhausts the budget on its own never renders in a call.
        try:
            render_template(text, {}, _parent=_CHECK_BUDGET.get())
        except TemplateBudgetExceeded as exc:
            problems.append(f"cannot be rendered within the template budget: {exc}")
        except TemplateRenderError:
            pass  # depends on variables that only exist at run time
    return problems


@contextlib.contextmanager
def template_check_scope() -> Iterator[None]:
    """Within this block, the trial renders of :func:`template_problems` share one budget of
    ``MAX_CHECK_OPERATIONS``: a definition with thousands of templates cannot add up to minutes."""
    token = _CHECK_BUDGET.set(_Budget(MAX_CHECK_OPERATIONS, float("inf")))
    try:
        yield
    finally:
        _CHECK_BUDGET.reset(token)


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


@functools.lru_cache(maxsize=1024)
def _compiled(text: str) -> Template:
    # Parsing and compiling is ~100 times the cost of rendering; a flow's templates repeat every turn.
    return _ENV.from_string(text)


def render_template(text: str, variables: Mapping[str, Any], *, _parent: _Budget | None = None) -> str:
    """Render ``text`` with ``variables`` in the sandbox; raise ``TemplateRenderError`` on any failure."""
    budget = _Budget(MAX_OPERATIONS, time.monotonic() + RENDER_DEADLINE_SECONDS, parent=_parent)
    token = _BUDGET.set(budget)
    try:
        template = _compiled(text)
        rendered = template.render(dict(variables))
    except TemplateRenderError:
        raise
    except SecurityError as exc:
        raise TemplateRenderError(f"the template was refused by the sandbox: {exc}") from exc
    except TemplateError as exc:
        raise TemplateRenderError(f"the template cannot be rendered: {exc.message}") from exc
    except (RecursionError, MemoryError) as exc:
        raise TemplateBudgetExceeded("the template nests or recurses too deeply") from exc
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        raise TemplateRenderError(f"the template cannot be rendered ({type(exc).__name__})") from exc
    finally:
        _BUDGET.reset(token)
    if len(rendered) > MAX_TEMPLATE_OUTPUT:
        raise TemplateRenderError(f"the rendered text is longer than {MAX_TEMPLATE_OUTPUT} characters")
    return rendered


# Nodes whose cost is one step over data already held, or one pass over it: no loop, no call, no
# repetition (``*``, ``**``), no string formatting (``%``), nothing that includes other templates.
_STRAIGHT_NODES = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.If,
    nodes.Assign,
    nodes.Name,
    nodes.Const,
    nodes.Getattr,
    nodes.Getitem,
    nodes.Slice,
    nodes.Compare,
    nodes.Operand,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.CondExpr,
    nodes.Add,
    nodes.Sub,
    nodes.Neg,
    nodes.Pos,
    nodes.Concat,
    nodes.Filter,
    nodes.Test,
)
_STRAIGHT_FILTERS = frozenset(
    {"default", "d", "int", "float", "string", "lower", "upper", "title", "capitalize", "trim", "round"}
    | {"abs", "length", "count", "first", "last", "e", "escape"}
)


def _cheap_filter(node: nodes.Filter) -> bool:
    if node.kwargs or node.dyn_args is not None or node.dyn_kwargs is not None:
        return False
    if node.name in ("default", "d"):
        return len(node.args) <= 2  # the fallback value (an expression checked like any other)
    return node.name in _STRAIGHT_FILTERS and not node.args


@functools.lru_cache(maxsize=1024)
def is_straight_line(text: str) -> bool:
    """Whether ``text`` renders in one pass over its data: no loops, calls, repetition or formatting,
    only cheap filters. Such a template may render on the event loop; any other goes to a thread."""
    try:
        tree = parse_template(text)
    except TemplateRenderError:
        return False
    for node in tree.find_all(nodes.Node):
        if type(node) not in _STRAIGHT_NODES:
            return False
        if isinstance(node, nodes.Filter) and not _cheap_filter(node):
            return False
        if isinstance(node, nodes.Assign) and not isinstance(node.target, nodes.Name):
            return False
    return True


async def render_template_async(text: str, variables: Mapping[str, Any]) -> str:
    """:func:`render_template` in a worker thread (the budget's deadline bounds how long it runs), or
    here when it is straight-line (:func:`is_straight_line`): a thread hop costs more than that render."""
    if is_straight_line(text):
        return render_template(text, variables)
    return await asyncio.to_thread(render_template, text, variables)


__all__ = [
    "MAX_TEMPLATE_OUTPUT",
    "TemplateBudgetExceeded",
    "TemplateRenderError",
    "is_straight_line",
    "parse_template",
    "render_template",
    "render_template_async",
    "template_check_scope",
    "template_problems",
    "template_variables",
]
