"""Graph rules of a flow definition, checked on save, on validate and before publishing.

Each problem names the node and the field it is about, so editors can point at it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from parley.flows.definition import (
    BUILTIN_VARIABLES,
    BranchNode,
    CollectNode,
    EndNode,
    FlowDefinition,
    KnowledgeNode,
    LlmNode,
    SayNode,
    SetNode,
    SignalNode,
    SpeechSettings,
    ToolNode,
    TransferNode,
    assigned_variables,
    node_targets,
)
from parley.flows.expressions import expression_problems
from parley.kit.templates import template_check_scope, template_problems, template_variables

# Node types the conversation waits at for the caller: a loop must pass through one.
WAITING_TYPES = ("collect", "llm")


@dataclass(frozen=True)
class Issue:
    node: str | None
    field: str
    message: str

    def loc(self) -> tuple[str | int, ...]:
        parts: list[str | int] = [int(p) if p.isdigit() else p for p in self.field.split(".") if p]
        if self.node is None:
            return ("body", "definition", *parts)
        return ("body", "definition", "nodes", self.node, *parts)


@dataclass(frozen=True)
class ToolRef:
    id: str
    name: str
    type: str


@dataclass
class OrgResources:
    """What the flow may refer to in its organization."""

    tools: Mapping[str, ToolRef]  # by name and by id
    document_ids: set[str] | None = None  # None: documents are not checked


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}.{index}")


def _templates(node: Any) -> Iterator[tuple[str, str, set[str]]]:
    """``(field, template, extra names)`` for every template of a node."""
    if isinstance(node, SayNode):
        yield "text", node.text, set()
    elif isinstance(node, CollectNode):
        yield "prompt", node.prompt, set()
        if node.reprompt is not None:
            yield "reprompt", node.reprompt, set()
    elif isinstance(node, ToolNode):
        for path, text in _strings(node.arguments, "arguments"):
            yield path, text, set()
    elif isinstance(node, LlmNode):
        yield "system_prompt", node.system_prompt, set()
    elif isinstance(node, KnowledgeNode):
        yield "query", node.query, set()
        yield "answer", node.answer, {"hits", "knowledge_answer"}
    elif isinstance(node, TransferNode):
        yield "message", node.message, set()
    elif isinstance(node, SignalNode):
        for path, text in _strings(node.details, "details"):
            yield path, text, set()
    elif isinstance(node, EndNode):
        yield "text", node.text, set()


def _check_template(node_id: str | None, field: str, text: str, known: set[str]) -> list[Issue]:
    problems = template_problems(text)
    if problems:
        return [Issue(node_id, field, p) for p in problems]
    unknown = sorted(template_variables(text) - known)
    return [
        Issue(node_id, field, f"the template uses {name!r}, which is not a variable of this flow")
        for name in unknown
    ]


def _cycles_without_waiting(definition: FlowDefinition, ids: set[str]) -> list[list[str]]:
    """Strongly connected components that loop but contain no collect or llm node (Tarjan)."""
    graph = {n.id: [t for _, t, _ in node_targets(n) if t in ids] for n in definition.nodes}
    types = {n.id: n.type for n in definition.nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def connect(start: str) -> None:
        nonlocal counter
        # Iterative Tarjan: (node, iterator over successors).
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            current, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    advanced = True
                    break
                if succ in on_stack:
                    low[current] = min(low[current], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                loops = len(component) > 1 or current in graph[current]
                if loops and not any(types[m] in WAITING_TYPES for m in component):
                    found.append(sorted(component, key=list(graph).index))

    for node_id in graph:
        if node_id not in index:
            connect(node_id)
    return found


def validate_definition(definition: FlowDefinition, resources: OrgResources) -> list[Issue]:
    # The trial renders of all the flow's templates share one budget (docs/security.md).
    with template_check_scope():
        return _validate_definition(definition, resources)


def _validate_definition(definition: FlowDefinition, resources: OrgResources) -> list[Issue]:
    issues: list[Issue] = []
    ids: set[str] = set()
    for node in definition.nodes:
        if node.id in ids:
            issues.append(Issue(node.id, "id", f"the node id {node.id!r} is used more than once"))
        ids.add(node.id)

    if definition.start_node not in ids:
        issues.append(
            Issue(None, "start_node", f"the start node {definition.start_node!r} is not one of the nodes")
        )

    known = set(definition.variables) | set(BUILTIN_VARIABLES)
    for node in definition.nodes:
        known |= assigned_variables(node)

    issues += _check_template(None, "prompt", definition.prompt, known)
    issues += _turn_taking_rules(definition)

    for node in definition.nodes:
        for field, target, _kind in node_targets(node):
            if target not in ids:
                issues.append(Issue(node.id, field, f"the target node {target!r} does not exist"))
        if not isinstance(node, EndNode | BranchNode | TransferNode) and not node_targets(node):
            issues.append(
                Issue(
                    node.id, "next", "the node does not say where to continue; set 'next' or use an end node"
                )
            )
        for field, text, extra in _templates(node):
            issues += _check_template(node.id, field, text, known | extra)
        issues += _node_rules(node, known, resources)

    if definition.start_node in ids:
        graph = {n.id: [t for _, t, _ in node_targets(n) if t in ids] for n in definition.nodes}
        reached = {definition.start_node}
        pending = [definition.start_node]
        while pending:
            for succ in graph[pending.pop()]:
                if succ not in reached:
                    reached.add(succ)
                    pending.append(succ)
        for node in definition.nodes:
            if node.id not in reached:
                issues.append(
                    Issue(node.id, "id", f"the node {node.id!r} cannot be reached from the start node")
                )

    issues += _voice_rules(definition)
    issues += _analysis_rules(definition)

    for component in _cycles_without_waiting(definition, ids):
        path = " → ".join([*component, component[0]])
        issues.append(
            Issue(
                component[0],
                "next",
                f"the nodes {path} form a loop that never waits for the caller; "
                "put a collect or llm node in it",
            )
        )
    # Keep the first report per (node, field, message), in order.
    return list(dict.fromkeys(issues))


def _turn_taking_rules(definition: FlowDefinition) -> list[Issue]:
    """The short hangover (an answer already complete) may not be longer than the normal one."""
    taking = definition.voice.turn_taking
    issues: list[Issue] = []
    if taking.short_hangover_ms > taking.hangover_ms:
        issues.append(
            Issue(
                None,
                "voice.turn_taking.short_hangover_ms",
                f"the short hangover ({taking.short_hangover_ms} ms) is longer than the hangover "
                f"({taking.hangover_ms} ms)",
            )
        )
    for node in definition.nodes:
        if not isinstance(node, CollectNode):
            continue
        short = node.short_hangover_ms or taking.short_hangover_ms
        normal = node.hangover_ms or taking.hangover_ms
        if (node.short_hangover_ms or node.hangover_ms) and short > normal:
            issues.append(
                Issue(
                    node.id,
                    "short_hangover_ms",
                    f"the short hangover ({short} ms) is longer than the hangover ({normal} ms)",
                )
            )
    return issues


def _node_rules(node: Any, known: set[str], resources: OrgResources) -> list[Issue]:
    issues: list[Issue] = []
    if isinstance(node, CollectNode):
        if node.kind == "choice" and not node.choices:
            issues.append(Issue(node.id, "choices", "a 'choice' collect node needs a list of choices"))
        if node.kind == "regex":
            if not node.pattern:
                issues.append(Issue(node.id, "pattern", "a 'regex' collect node needs a pattern"))
            else:
                try:
                    re.compile(node.pattern)
                except re.error as exc:
                    issues.append(Issue(node.id, "pattern", f"the pattern does not compile: {exc}"))
        if node.min_length is not None and node.max_length is not None and node.min_length > node.max_length:
            issues.append(Issue(node.id, "min_length", "min_length is greater than max_length"))
    elif isinstance(node, ToolNode):
        if node.tool not in resources.tools:
            issues.append(
                Issue(node.id, "tool", f"the tool {node.tool!r} does not exist in this organization")
            )
    elif isinstance(node, LlmNode):
        for index, tool in enumerate(node.tools):
            if tool not in resources.tools:
                issues.append(
                    Issue(node.id, f"tools.{index}", f"the tool {tool!r} does not exist in this organization")
                )
        names = [t.name for t in node.transitions]
        for index, name in enumerate(names):
            if names.index(name) != index:
                issues.append(
                    Issue(node.id, f"transitions.{index}.name", f"the transition {name!r} is repeated")
                )
    elif isinstance(node, BranchNode):
        for index, condition in enumerate(node.conditions):
            for problem in expression_problems(condition.when, known):
                issues.append(Issue(node.id, f"conditions.{index}.when", problem))
    elif isinstance(node, SetNode):
        for name, expression in node.assignments.items():
            for problem in expression_problems(expression, known):
                issues.append(Issue(node.id, f"assignments.{name}", problem))
    elif isinstance(node, KnowledgeNode) and node.document_ids and resources.document_ids is not None:
        for index, doc_id in enumerate(node.document_ids):
            if doc_id not in resources.document_ids:
                issues.append(
                    Issue(node.id, f"document_ids.{index}", f"the document {doc_id!r} does not exist")
                )
    return issues


# What the speech engines can serve is the voice package's knowledge; it sits above flows, so it hands
# its checks over at import (parley.voice.capabilities): (settings, languages) -> [(field, sentence)].
SpeechCheck = Callable[[SpeechSettings, list[str]], list[tuple[str, str]]]
STT_CHECKS: list[SpeechCheck] = []
TTS_CHECKS: list[SpeechCheck] = []


def _voice_rules(definition: FlowDefinition) -> list[Issue]:
    """The voice settings against what the named engines can serve (see docs/flows.md)."""
    voice = definition.voice
    if voice is None:
        return []
    issues: list[Issue] = []
    languages = list(dict.fromkeys([definition.language, *definition.languages]))
    for kind, settings, checks in (("stt", voice.stt, STT_CHECKS), ("tts", voice.tts, TTS_CHECKS)):
        if settings is None:
            continue
        for check in checks:
            for field, message in check(settings, languages):
                issues.append(Issue(None, f"voice.{kind}.{field}", message))
    return issues


def _analysis_rules(definition: FlowDefinition) -> list[Issue]:
    """The ``analysis`` block: enum fields name their values, other types take none, and it asks for
    something."""
    analysis = definition.analysis
    if analysis is None:
        return []
    issues: list[Issue] = []
    if not analysis.summary and not analysis.fields:
        issues.append(
            Issue(None, "analysis", "the analysis asks for nothing; set 'summary': true or declare 'fields'")
        )
    for name, spec in analysis.fields.items():
        where = f"analysis.fields.{name}.values"
        if spec.type == "enum":
            if not spec.values:
                issues.append(Issue(None, where, f"the enum field {name!r} needs a list of allowed 'values'"))
            elif len(set(spec.values)) != len(spec.values):
                issues.append(Issue(None, where, f"the enum field {name!r} lists a value more than once"))
        elif spec.values is not None:
            issues.append(
                Issue(None, where, f"'values' only applies to enum fields; {name!r} is of type {spec.type}")
            )
    return issues
