"""Branch conditions and ``set`` assignments: small expressions, checked and evaluated without ``eval``.

Validation parses with ``ast.parse(mode="eval")`` and accepts only a whitelist of syntax (literals,
names, attribute/index reads of public names, comparisons, boolean logic, arithmetic, conditional
expressions and calls of the functions below). Evaluation uses simpleeval, which refuses dunder
access and bounds powers and string sizes on its own as well.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import simpleeval

MAX_EXPRESSION_LENGTH = 1000


def _lower(value: Any) -> str:
    return str(value).lower()


def _upper(value: Any) -> str:
    return str(value).upper()


def _strip(value: Any) -> str:
    return str(value).strip()


def _contains(container: Any, item: Any) -> bool:
    try:
        return item in container
    except TypeError:
        return False


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _digits(value: Any) -> str:
    return re.sub(r"\D", "", str(value))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": len,
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "round": round,
    "abs": abs,
    "min": min,
    "max": max,
    "lower": _lower,
    "upper": _upper,
    "strip": _strip,
    "contains": _contains,
    "is_empty": _is_empty,
    "digits": _digits,
}

_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Attribute,
    ast.Subscript,
    ast.List,
    ast.Tuple,
)


class ExpressionError(Exception):
    """An expression is not acceptable or cannot be evaluated; the message is safe to show."""


@functools.lru_cache(maxsize=2048)
def _parsed(text: str) -> tuple[ast.Expression | None, tuple[tuple[str, str], ...]]:
    """``text``'s tree (None when it does not parse) and, in the order of a walk of it, its problems
    (``("problem", message)``) and the variables it reads (``("name", name)``), which only a flow's
    known names can judge. Flows evaluate the same expressions every turn: parsed once here."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        return None, (("problem", f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters"),)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        return None, (("problem", f"the expression does not parse: {exc.msg}"),)
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            found.append(("problem", f"{type(node).__name__} is not allowed in expressions"))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            found.append(("problem", f"the private attribute {node.attr!r} may not be used"))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
            and node.slice.value.startswith("_")
        ):
            found.append(("problem", f"the private key {node.slice.value!r} may not be used"))
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                found.append(
                    (
                        "problem",
                        f"the function {name!r} is not available; use one of {', '.join(sorted(FUNCTIONS))}",
                    )
                )
            elif node.keywords:
                found.append(("problem", "keyword arguments are not supported"))
        elif isinstance(node, ast.Name) and node.id.startswith("_"):
            found.append(("problem", f"the private name {node.id!r} may not be used"))
        elif isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            found.append(("name", node.id))
    return tree, tuple(found)


def expression_problems(text: str, known_names: Iterable[str]) -> list[str]:
    """Why ``text`` is not an acceptable expression over ``known_names``; empty when fine."""
    _tree, found = _parsed(text)
    known = known_names if isinstance(known_names, AbstractSet) else set(known_names)
    problems = [
        detail if kind == "problem" else f"the variable {detail!r} is not defined in this flow"
        for kind, detail in found
        if kind == "problem" or detail not in known
    ]
    # A function name used as a value (``len`` instead of ``len(x)``) is caught at evaluation time.
    return list(dict.fromkeys(problems))


class _Evaluator(simpleeval.EvalWithCompoundTypes):  # type: ignore[misc]
    """``a.b`` reads key ``b`` of the object ``a`` (flow data is JSON); a missing key is None."""

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        value = self._eval(node.value)
        if isinstance(value, Mapping):
            return value.get(node.attr)
        if value is None:
            return None
        raise ExpressionError(
            f"'.{node.attr}' can only be read from an object, not from {type(value).__name__}"
        )


MAX_INT_BITS = 4096


def _bounded_mult(left: Any, right: Any) -> Any:
    both_ints = isinstance(left, int) and isinstance(right, int)
    if both_ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
        raise ExpressionError(f"the product is larger than {MAX_INT_BITS} bits")
    return simpleeval.safe_mult(left, right)


# Powers are not in the syntax whitelist; products of integers are bounded here.
_OPERATORS = {**simpleeval.DEFAULT_OPERATORS, ast.Mult: _bounded_mult}


def evaluate(text: str, variables: Mapping[str, Any]) -> Any:
    """Evaluate an expression over ``variables`` (raise ``ExpressionError`` when it fails).

    Expressions have no loops and at most ``MAX_EXPRESSION_LENGTH`` characters; with strings bounded
    by simpleeval (100,000 characters) and numbers by ``MAX_INT_BITS``, each one is cheap.
    """
    problems = expression_problems(text, variables.keys())
    if problems:
        raise ExpressionError(problems[0])
    tree, _found = _parsed(text)
    assert tree is not None  # a text that does not parse has a problem
    evaluator = _Evaluator(operators=_OPERATORS, names=dict(variables), functions=FUNCTIONS)
    try:
        return evaluator.eval(text.strip(), previously_parsed=tree.body)
    except simpleeval.InvalidExpression as exc:
        raise ExpressionError(f"the expression cannot be evaluated: {exc}") from exc
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        raise ExpressionError(f"the expression cannot be evaluated ({type(exc).__name__})") from exc
