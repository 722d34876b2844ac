"""Reading scenarios: JSON items as they are, flat CSV rows turned into the same shape, and names
(tools, nodes) checked against the suite's flow when it is known."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from parley.evaluations.schemas import Scenario
from parley.flows.definition import FlowDefinition, LlmNode, ToolNode

SILENCE = "<silence>"
_LIST_COLUMNS = ("expect_contains", "expect_not_contains", "expect_matches")


@dataclass
class Problem:
    index: int  # position of the item in the batch (0-based)
    message: str


def _split(value: str, sep: str) -> list[str]:
    return [part.strip() for part in value.split(sep) if part.strip()]


def _json_cell(row: dict[str, Any], key: str) -> Any:
    raw = row.get(key)
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the column {key!r} is not valid JSON ({exc.msg})") from exc


def from_csv_row(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row (every value text) as a scenario: ``turns`` holds the caller's lines separated by
    ``|`` (``<silence>`` for a silent turn); ``expect_contains``/``expect_not_contains``/
    ``expect_matches`` hold checks separated by ``|``; ``expect_outcome``, ``expect_end_reason``,
    ``expect_signals`` (comma-separated), ``expect_tools`` (comma-separated); ``variables``,
    ``mocks`` and ``expect`` may hold JSON."""
    known = {
        "name", "scenario", "description", "language", "caller", "turns", "variables", "mocks", "expect",
        "expect_outcome", "expect_end_reason", "expect_signals", "expect_tools", *_LIST_COLUMNS,
    }  # fmt: skip
    unknown = sorted(k for k in row if k not in known)
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(map(repr, unknown))}")
    out: dict[str, Any] = {"name": (row.get("name") or row.get("scenario") or "").strip()}
    for key in ("description", "language", "caller"):
        if str(row.get(key) or "").strip():
            out[key] = str(row[key]).strip()
    turns = []
    for line in _split(str(row.get("turns") or ""), "|"):
        turns.append({"silence": True} if line.lower() == SILENCE else {"say": line})
    out["turns"] = turns
    for key in ("variables", "mocks"):
        if (value := _json_cell(row, key)) is not None:
            out[key] = value
    expect = _json_cell(row, "expect") or {}
    if not isinstance(expect, dict):
        raise ValueError("the column 'expect' must hold a JSON object")
    said = list(expect.get("said") or [])
    for column in _LIST_COLUMNS:
        check = column.removeprefix("expect_")
        said.extend({check: part} for part in _split(str(row.get(column) or ""), "|"))
    if said:
        expect["said"] = said
    if str(row.get("expect_outcome") or "").strip():
        expect["outcome"] = str(row["expect_outcome"]).strip()
    if str(row.get("expect_end_reason") or "").strip():
        expect["end_reason"] = str(row["expect_end_reason"]).strip()
    if signals := _split(str(row.get("expect_signals") or ""), ","):
        expect["signals"] = signals
    if tools := _split(str(row.get("expect_tools") or ""), ","):
        expect["tool_calls"] = [{"tool": tool} for tool in tools]
    if expect:
        out["expect"] = expect
    return out


def _is_flat(data: dict[str, Any]) -> bool:
    return isinstance(data.get("turns"), str) or any(k.startswith("expect_") for k in data)


def _messages(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def flow_names(definition: FlowDefinition) -> tuple[set[str], set[str]]:
    """The tool names and node ids a flow uses."""
    tools: set[str] = set()
    for node in definition.nodes:
        if isinstance(node, ToolNode):
            tools.add(node.tool)
        elif isinstance(node, LlmNode):
            tools.update(node.tools)
    return tools, {node.id for node in definition.nodes}


def check_names(scenario: Scenario, definition: FlowDefinition) -> list[str]:
    tools, nodes = flow_names(definition)
    problems = []
    for name in scenario.mocks:
        if name not in tools:
            problems.append(
                f"mocks: the flow uses no tool named {name!r} (it uses {sorted(tools) or 'none'})"
            )
    named = [c.tool for c in scenario.expect.tool_calls] + scenario.expect.no_tool_calls
    for name in named:
        if name not in tools:
            problems.append(
                f"expect: the flow uses no tool named {name!r} (it uses {sorted(tools) or 'none'})"
            )
    for node in [*scenario.expect.visits, *([scenario.expect.ends_at] if scenario.expect.ends_at else [])]:
        if node not in nodes:
            problems.append(f"expect: the flow has no node {node!r}")
    return problems


def parse_items(
    items: list[dict[str, Any]], definition: FlowDefinition | None
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Validate ``items`` as scenarios; answers them in their stored (normalized) form and the problems."""
    normalized: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for index, raw in enumerate(items):
        try:
            data = from_csv_row(raw) if _is_flat(raw) else raw
            scenario = Scenario.model_validate(data)
        except ValueError as exc:  # ValidationError is a ValueError too
            message = _messages(exc) if isinstance(exc, ValidationError) else str(exc)
            problems.append(Problem(index, message))
            continue
        if definition is not None and (named := check_names(scenario, definition)):
            problems.append(Problem(index, "; ".join(named)))
            continue
        normalized.append(scenario.model_dump(mode="json", exclude_defaults=True) | {"name": scenario.name})
    return normalized, problems
