"""Built-in brain-signal rules, evaluated on every call record when it is stored.

Each rule is a small function from the record to the findings it raises (usually zero or one); the
``RULES`` registry lists them with their type and severity. docs/calls.md describes each one.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from parley.brain.contracts import FinishedConversation, ToolCall
from parley.kit.schemas import Severity

LONG_SILENCE_SECONDS = 20.0
# A synthetic voice's pace (espeak's default of 175 words a minute is about 15 characters a second).
SPOKEN_CHARACTERS_PER_SECOND = 15.0


@dataclass(frozen=True)
class Finding:
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    type: str
    severity: Severity
    description: str
    check: Callable[[FinishedConversation], list[Finding]]


def _caller_turns(record: FinishedConversation) -> list[tuple[int, str]]:
    return [(t.index, t.text) for t in record.transcript if t.speaker == "caller"]


# Four rules read each caller turn normalized, and callers say the same short things ("nein", "ja"):
# kept for the last few hundred texts (a pure function of the text).
@functools.lru_cache(maxsize=256)
def normalize(text: str) -> str:
    """Lower case, umlauts kept, punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


def _matches(record: FinishedConversation, pattern: re.Pattern[str]) -> list[dict[str, Any]]:
    hits = []
    for index, text in _caller_turns(record):
        found = sorted({m.group(0) for m in pattern.finditer(normalize(text))})
        if found:
            hits.append({"turn_index": index, "matched": found})
    return hits


# --- order_not_found ---------------------------------------------------------------------------


def _is_order_tool(call: ToolCall) -> bool:
    return "order" in call.tool_name.casefold() or "bestell" in call.tool_name.casefold()


def _not_found_result(call: ToolCall) -> bool:
    if call.http_status == 404:
        return True
    result = call.result
    if isinstance(result, dict):
        if result.get("success") is False or result.get("found") is False:
            return True
        status = result.get("status")
        if status == 404 or (isinstance(status, str) and status.casefold() in {"not_found", "notfound"}):
            return True
    return False


def order_not_found(record: FinishedConversation) -> list[Finding]:
    misses = [
        {"tool_name": c.tool_name, "arguments": c.arguments, "http_status": c.http_status}
        for c in record.tool_calls
        if _is_order_tool(c) and c.status != "dry_run" and _not_found_result(c)
    ]
    return [Finding({"lookups": misses, "count": len(misses)})] if misses else []


# --- tool_failure ------------------------------------------------------------------------------


def tool_failure(record: FinishedConversation) -> list[Finding]:
    failures = [
        {
            "tool_name": c.tool_name,
            "tool_id": c.tool_id,
            "status": c.status,
            "http_status": c.http_status,
            "error": c.error,
            "latency_ms": c.latency_ms,
        }
        for c in record.tool_calls
        if c.status in ("error", "timeout")
    ]
    return [Finding({"failures": failures, "count": len(failures)})] if failures else []


# --- callback_requested ------------------------------------------------------------------------

_CALLBACK = re.compile(
    r"r[üu]ckruf\w*|zur[üu]ckruf\w*|ruf\w* \w*\s?mich \w*\s?zur[üu]ck|"
    r"call me back|callback|call back|ring me back|give me a call"
)


def callback_requested(record: FinishedConversation) -> list[Finding]:
    hits = _matches(record, _CALLBACK)
    return [Finding({"turns": hits})] if hits else []


# --- transfer_requested ------------------------------------------------------------------------

_HUMAN = re.compile(
    r"\b(?:mitarbeiter\w*|menschen?|echten person|person sprechen|sachbearbeiter\w*|kundenservice|"
    r"kollegen?|verbinden sie mich|human|real person|a person|representative|operator|"
    r"live agent|an agent|speak to someone|talk to someone)\b"
)


def transfer_requested(record: FinishedConversation) -> list[Finding]:
    hits = _matches(record, _HUMAN)
    if not hits and record.outcome != "transferred":
        return []
    details: dict[str, Any] = {"turns": hits, "outcome": record.outcome}
    if record.transferred_to:
        details["transferred_to"] = record.transferred_to
    return [Finding(details)]


# --- negative_sentiment ------------------------------------------------------------------------

_NEGATIVE = re.compile(
    r"\b(?:ärger\w*|verärgert|unzufrieden|frechheit|unverschämt\w*|katastroph\w*|enttäuscht|"
    r"wütend|sauer|beschwer\w*|nervt|nervig|unmöglich|schrecklich|furchtbar|miserabel|"
    r"angry|furious|frustrat\w*|terrible|awful|ridiculous|unacceptable|disappointed|useless|"
    r"worst|annoyed|annoying|complain\w*|horrible|pathetic|outrageous)\b"
)


def negative_sentiment(record: FinishedConversation) -> list[Finding]:
    hits = _matches(record, _NEGATIVE)
    return [Finding({"turns": hits, "method": "keywords"})] if hits else []


# --- long_silence ------------------------------------------------------------------------------


def speaking_seconds(text: str) -> float:
    """About how long saying ``text`` takes (a turn records when it was said, not how long it lasted)."""
    return len(text) / SPOKEN_CHARACTERS_PER_SECOND


def long_silence(record: FinishedConversation) -> list[Finding]:
    """Silence on the caller's side only: from the end of the agent's words to the caller's next words.

    Time the agent spends talking (its turns last as long as their text takes to say) or thinking (a
    slow tool between two agent turns) is not the caller's silence.
    """
    turns = sorted(record.transcript, key=lambda t: t.index)
    gaps = []
    agent_done: datetime | None = None  # when the agent's last words ended
    previous = None
    for turn in turns:
        if turn.speaker == "agent":
            start = max(turn.at, agent_done) if agent_done else turn.at
            agent_done = start + timedelta(seconds=speaking_seconds(turn.text))
        elif agent_done is not None and previous is not None and previous.speaker == "agent":
            began = turn.at - timedelta(seconds=speaking_seconds(turn.text))
            seconds = (began - agent_done).total_seconds()
            if seconds > LONG_SILENCE_SECONDS:
                gaps.append({"after_turn_index": previous.index, "seconds": round(seconds, 1)})
        previous = turn
    if not gaps:
        return []
    return [Finding({"gaps": gaps, "longest_seconds": max(g["seconds"] for g in gaps)})]


# --- caller_repeats ----------------------------------------------------------------------------

_FILLERS = frozenset(
    {"ja", "nein", "yes", "no", "ok", "okay", "genau", "mhm", "hm", "danke", "thanks", "thank you", "bitte"}
)


def caller_repeats(record: FinishedConversation) -> list[Finding]:
    seen: dict[str, list[int]] = {}
    for index, text in _caller_turns(record):
        key = normalize(text)
        if len(key) < 3 or key in _FILLERS:
            continue
        seen.setdefault(key, []).append(index)
    repeats = [{"text": text, "turn_indexes": idx} for text, idx in seen.items() if len(idx) >= 2]
    return [Finding({"repeats": repeats})] if repeats else []


RULES: tuple[Rule, ...] = (
    Rule("order_not_found", "medium", "An order lookup answered 404 or success: false.", order_not_found),
    Rule("tool_failure", "high", "A tool call ended with status error or timeout.", tool_failure),
    Rule("callback_requested", "medium", "The caller asked to be called back.", callback_requested),
    Rule(
        "transfer_requested",
        "low",
        "The caller asked for a person, or the call was transferred.",
        transfer_requested,
    ),
    Rule("negative_sentiment", "medium", "The caller used angry or frustrated words.", negative_sentiment),
    Rule(
        "long_silence",
        "low",
        f"The caller was silent more than {LONG_SILENCE_SECONDS:.0f} s after the agent finished speaking.",
        long_silence,
    ),
    Rule("caller_repeats", "low", "The caller said the same thing twice or more.", caller_repeats),
)


def evaluate(record: FinishedConversation) -> list[tuple[Rule, Finding]]:
    return [(rule, finding) for rule in RULES for finding in rule.check(record)]
