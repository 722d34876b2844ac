"""Each built-in rule, positive and negative, in German and English."""

from __future__ import annotations

from datetime import timedelta

import pytest

from parley.brain import rules
from parley.calls.contracts import CallRecordIn
from tests.calls.helpers import START, make_record, order_lookup, turns

ORG = "org_01RULES"


def fired(record: CallRecordIn) -> list[str]:
    return sorted(rule.type for rule, _ in rules.evaluate(record))


def caller_says(*texts: str, **overrides: object) -> CallRecordIn:
    lines: list[tuple[str, str]] = []
    for text in texts:
        lines += [("agent", "Wie kann ich helfen?"), ("caller", text)]
    return make_record(ORG, lines=tuple(lines), **overrides)


def test_every_rule_is_registered_once_with_a_severity() -> None:
    types = [rule.type for rule in rules.RULES]
    assert types == [
        "order_not_found",
        "tool_failure",
        "callback_requested",
        "transfer_requested",
        "negative_sentiment",
        "long_silence",
        "caller_repeats",
    ]
    assert {rule.severity for rule in rules.RULES} <= {"info", "low", "medium", "high", "critical"}


def test_the_happy_call_fires_nothing() -> None:
    assert fired(make_record(ORG)) == []


@pytest.mark.parametrize(
    "lookup",
    [
        order_lookup(status="error", http_status=404, result={"detail": "no such order"}),
        order_lookup(http_status=200, result={"success": False, "message": "Bestellung nicht gefunden"}),
    ],
)
def test_order_not_found(lookup: object) -> None:
    found = rules.evaluate(make_record(ORG, tool_calls=[lookup]))
    assert "order_not_found" in [rule.type for rule, _ in found]
    details = next(f.details for rule, f in found if rule.type == "order_not_found")
    assert details["lookups"][0]["arguments"] == {"order_number": "A-1001"}


def test_a_found_order_or_another_tool_is_not_order_not_found() -> None:
    weather = order_lookup(http_status=404).model_copy(update={"tool_name": "weather"})
    assert "order_not_found" not in fired(make_record(ORG, tool_calls=[order_lookup(), weather]))


@pytest.mark.parametrize("status", ["error", "timeout"])
def test_tool_failure(status: str) -> None:
    lookup = order_lookup(status=status, http_status=None if status == "timeout" else 500, result={})
    found = rules.evaluate(make_record(ORG, tool_calls=[lookup]))
    failure = next(f for rule, f in found if rule.type == "tool_failure")
    assert failure.details["failures"][0]["status"] == status
    assert failure.details["count"] == 1


def test_ok_and_dry_run_tools_are_no_failures() -> None:
    dry = order_lookup(status="dry_run")
    assert "tool_failure" not in fired(make_record(ORG, tool_calls=[order_lookup(), dry]))


@pytest.mark.parametrize(
    "text",
    [
        "Können Sie mich bitte zurückrufen?",
        "Ich hätte gern einen Rückruf.",
        "Rufen Sie mich morgen zurück.",
        "Could you call me back tomorrow?",
        "I'd like a callback please.",
    ],
)
def test_callback_requested(text: str) -> None:
    assert "callback_requested" in fired(caller_says(text))


@pytest.mark.parametrize(
    "text", ["Ich rufe nicht an, ich schreibe lieber.", "I'll check back later, thanks."]
)
def test_no_callback_requested(text: str) -> None:
    assert "callback_requested" not in fired(caller_says(text))


@pytest.mark.parametrize(
    "text",
    [
        "Ich möchte mit einem Mitarbeiter sprechen.",
        "Verbinden Sie mich mit einem Menschen!",
        "Can I talk to a human?",
        "Please get me a representative.",
    ],
)
def test_transfer_requested_by_words(text: str) -> None:
    assert "transfer_requested" in fired(caller_says(text))


def test_transfer_requested_by_outcome() -> None:
    record = make_record(ORG, outcome="transferred", transferred_to="+4930555")
    found = rules.evaluate(record)
    details = next(f.details for rule, f in found if rule.type == "transfer_requested")
    assert details["transferred_to"] == "+4930555"


def test_no_transfer_requested() -> None:
    assert "transfer_requested" not in fired(
        caller_says("Wo ist meine Bestellung?", "Where is my personal order?")
    )


@pytest.mark.parametrize(
    "text",
    [
        "Das ist eine Frechheit, ich bin wirklich verärgert.",
        "Ich bin sehr unzufrieden mit dem Service.",
        "This is ridiculous, I'm so frustrated.",
        "Terrible service, I'm disappointed.",
    ],
)
def test_negative_sentiment(text: str) -> None:
    found = rules.evaluate(caller_says(text))
    details = next(f.details for rule, f in found if rule.type == "negative_sentiment")
    assert details["method"] == "keywords" and details["turns"][0]["matched"]


@pytest.mark.parametrize("text", ["Vielen Dank, das ist super.", "Great, thanks a lot!"])
def test_no_negative_sentiment(text: str) -> None:
    assert "negative_sentiment" not in fired(caller_says(text))


def test_long_silence_is_the_callers() -> None:
    """The caller says nothing for 30 s after the agent's question ended (15 characters a second)."""
    question, answer = "Ihre Nummer?", "Vier zwei."  # 12 and 10 characters: 0.8 s and 0.67 s of speech
    lines = turns(("agent", "Hallo?"), ("agent", question), ("caller", answer), start=START, gap=0)
    said = START + timedelta(seconds=0.4 + 0.8)  # "Hallo?" (0.4 s), then the question
    lines[2] = lines[2].model_copy(update={"at": said + timedelta(seconds=30 + len(answer) / 15)})
    found = rules.evaluate(make_record(ORG, transcript=lines))
    details = next(f.details for rule, f in found if rule.type == "long_silence")
    assert details == {"gaps": [{"after_turn_index": 1, "seconds": 30.0}], "longest_seconds": 30.0}


def test_the_agent_talking_or_thinking_is_no_silence() -> None:
    long_answer = "Ihr Auftrag ist in Arbeit. " * 17  # 459 characters: about 31 s of speech
    lines = turns(("agent", long_answer), ("caller", "Danke."), ("agent", "Gern."), start=START, gap=0)
    lines[1] = lines[1].model_copy(update={"at": START + timedelta(seconds=45)})  # 14 s after it ended
    lines[2] = lines[2].model_copy(update={"at": lines[1].at + timedelta(seconds=40)})  # a slow tool
    assert "long_silence" not in fired(make_record(ORG, transcript=lines))


def test_no_long_silence_under_the_threshold() -> None:
    lines = turns(("agent", "Hallo?"), ("caller", "Ja."), start=START, gap=19.5)
    assert "long_silence" not in fired(make_record(ORG, transcript=lines))


@pytest.mark.parametrize(
    "texts",
    [
        ("Wo ist meine Bestellung?", "wo ist meine Bestellung"),
        ("I want my order status.", "I want my ORDER status!"),
    ],
)
def test_caller_repeats(texts: tuple[str, str]) -> None:
    found = rules.evaluate(caller_says(*texts))
    details = next(f.details for rule, f in found if rule.type == "caller_repeats")
    assert details["repeats"][0]["turn_indexes"] == [1, 3]


def test_short_answers_are_no_repeats() -> None:
    assert "caller_repeats" not in fired(
        caller_says("Ja.", "ja", "Danke", "danke!", "Wo ist A-1001?", "Und A-1002?")
    )
