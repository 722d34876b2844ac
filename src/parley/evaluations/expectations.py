"""Checking what a conversation did against a scenario's expectations: every failed expectation is
reported with what was expected and what happened."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from parley.evaluations.schemas import Range, Scenario, TextCheck
from parley.runtime.state import ConversationState

# Short, frequent words that tell German from English in an agent's sentence. Only de/en are checked
# (the languages the flow engine and the offline voices speak); a sentence with neither is "unknown".


def _vocab(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WORDS = {
    "de": _vocab(
        "der die das und ist ich sie ihr ihre ihren nicht mit ein eine einen zu den dem von für auf bitte "
        "danke wir uns hier ihnen möchten können kann wird sind hat haben noch gerade leider nummer "
        "guten tag auf wiederhören vielen dank verbinde kollegen auftrag rückruf"
    ),
    "en": _vocab(
        "the and is i you your not with a an to of for on please thank we us here would could can will "
        "are has have still just sorry number hello this that order call back goodbye colleague "
        "connecting find"
    ),
}
_WORD = re.compile(r"[a-zäöüß]+")


def detect_language(text: str) -> str | None:
    """'de', 'en' or None (no telling words)."""
    words = _WORD.findall(text.casefold())
    scores = {lang: sum(1 for w in words if w in vocab) for lang, vocab in _WORDS.items()}
    scores["de"] += sum(1 for ch in text if ch in "äöüßÄÖÜ")
    best = max(scores, key=lambda k: scores[k])
    if scores[best] == 0 or list(scores.values()).count(scores[best]) > 1:
        return None
    return best


@dataclass
class TurnRecord:
    index: int  # 0: the opening; n: the reply to the caller's n-th turn
    caller: str | None
    reply: str
    engine_ms: float
    tool_ms: float
    llm_ms: float
    # voice mode: what was said and heard, the recognition accuracy and the pipeline's figures
    voice: dict[str, Any] | None = None

    @property
    def total_ms(self) -> float:
        return round(self.engine_ms + self.tool_ms + self.llm_ms, 3)

    def as_json(self) -> dict[str, Any]:
        return {
            "turn": self.index,
            "caller": self.caller,
            "reply": self.reply,
            "engine_ms": round(self.engine_ms, 3),
            "tool_ms": round(self.tool_ms, 3),
            "llm_ms": round(self.llm_ms, 3),
            "total_ms": self.total_ms,
            **({"voice": self.voice} if self.voice is not None else {}),
        }


@dataclass
class Conversation:
    state: ConversationState
    turns: list[TurnRecord] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)
    unused_turns: int = 0

    @property
    def caller_turns(self) -> int:
        return len(self.turns) - 1 if self.turns else 0

    @property
    def said(self) -> str:
        return " ".join(t.reply for t in self.turns if t.reply)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def check_text(check: TextCheck, text: str, language: str) -> tuple[Any, Any] | None:
    """None when the check holds, else (expected, actual)."""
    folded = text.casefold()
    if check.contains is not None and check.contains.casefold() not in folded:
        return check.contains, text
    if check.not_contains is not None and check.not_contains.casefold() in folded:
        return f"not {check.not_contains!r}", text
    if check.matches is not None and re.search(check.matches, text) is None:
        return check.matches, text
    if check.language is not None:
        wanted = language[:2] if check.language == "flow" else check.language
        heard = detect_language(text)
        if heard != wanted:
            return wanted, heard
    return None


def _in_range(value: int, wanted: int | Range) -> bool:
    if isinstance(wanted, int):
        return value == wanted
    return (wanted.min is None or value >= wanted.min) and (wanted.max is None or value <= wanted.max)


def _wanted(wanted: int | Range) -> Any:
    return wanted if isinstance(wanted, int) else wanted.model_dump(exclude_none=True)


def check(
    scenario: Scenario, turn_checks: list[list[TextCheck]], conversation: Conversation
) -> list[dict[str, Any]]:
    """Every failed expectation as ``{expectation, expected, actual, turn}``."""
    state = conversation.state
    language = str(state.variables.get("language") or "de")
    failures: list[dict[str, Any]] = []

    def fail(expectation: str, expected: Any, actual: Any, turn: int | None = None) -> None:
        failures.append({"expectation": expectation, "expected": expected, "actual": actual, "turn": turn})

    for turn, checks in zip(conversation.turns, turn_checks, strict=False):
        for item in checks:
            if (miss := check_text(item, turn.reply, language)) is not None:
                label = "opening" if turn.index == 0 else f"reply to turn {turn.index}"
                fail(f"{label}: {item.describe()}", *miss, turn=turn.index)
    if conversation.unused_turns:
        fail(
            "script: every caller turn is used",
            f"{len(scenario.turns)} caller turns",
            f"the conversation ended after {conversation.caller_turns}; {conversation.unused_turns} not used",
        )
    expect = scenario.expect
    for item in expect.said:
        if (miss := check_text(item, conversation.said, language)) is not None:
            fail(f"said: {item.describe()}", *miss)
    for name, value in expect.variables.items():
        actual = state.variables.get(name)
        if _text(actual) != _text(value):
            fail(f"variable {name}", value, actual)
    for wanted in expect.tool_calls:
        calls = [c for c in state.tool_calls if c.tool_name == wanted.tool]
        if not calls:
            fail(f"tool call {wanted.tool}", "called", [c.tool_name for c in state.tool_calls])
            continue
        matching = [
            c
            for c in calls
            if (wanted.status is None or c.status == wanted.status)
            and all(_text(c.arguments.get(k)) == _text(v) for k, v in (wanted.arguments or {}).items())
        ]
        if not matching:
            expected = {
                k: v for k, v in {"arguments": wanted.arguments, "status": wanted.status}.items() if v
            }
            actual = [{"arguments": c.arguments, "status": c.status} for c in calls]
            fail(f"tool call {wanted.tool}", expected, actual)
    for name in expect.no_tool_calls:
        if any(c.tool_name == name for c in state.tool_calls):
            fail(f"no tool call {name}", "not called", "called")
    if expect.outcome is not None and state.outcome != expect.outcome:
        fail("outcome", expect.outcome, state.outcome)
    if expect.end_reason is not None and state.end_reason != expect.end_reason:
        fail("end reason", expect.end_reason, state.end_reason)
    if expect.ends_at is not None and state.current_node != expect.ends_at:
        fail("ends at node", expect.ends_at, state.current_node)
    for node in expect.visits:
        if node not in conversation.visited:
            fail(f"visits node {node}", "visited", conversation.visited)
    raised = [s.type for s in state.signals]
    for name in expect.signals:
        if name not in raised:
            fail(f"signal {name}", "raised", raised)
    for name in expect.no_signals:
        if name in raised:
            fail(f"no signal {name}", "not raised", raised)
    if expect.turns is not None and not _in_range(conversation.caller_turns, expect.turns):
        fail("caller turns", _wanted(expect.turns), conversation.caller_turns)
    if expect.max_turn_ms is not None:
        for turn in conversation.turns:
            if turn.total_ms > expect.max_turn_ms:
                fail("turn latency (ms)", f"<= {expect.max_turn_ms}", turn.total_ms, turn=turn.index)
    return failures
