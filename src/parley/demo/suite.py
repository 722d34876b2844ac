"""The demo shop's test suite for its order-status agents: German and English, a known order (with
and without a callback; the cost only when asked), an unknown order, a connector outage (a mocked
tool error) and a caller who does not answer. Order 12 exists in the demo connector's orders; 999999 and 999998 do not."""

from __future__ import annotations

from typing import Any

SUITE_NAME = "Order status regression"

_TEXT = {
    "de": {
        "greeting": "Auftragsservice",
        "ask": "Bitte nennen Sie mir Ihre Auftragsnummer.",
        "status": "fertig am",
        "cost_question": "Möchten Sie die Kosten wissen?",
        "cost": "Euro brutto",
        "callback": "Möchten Sie einen Rückruf?",
        "no": "nein danke",
        "yes": "ja bitte",
        "order": "eins zwei",
        "not_found": "finde den Auftrag 999999",
        "fallback": "Entschuldigung, das hat gerade nicht geklappt.",
        "handoff": "Ich verbinde Sie mit einem Kollegen.",
        "reprompt": "Bitte sagen Sie die Ziffern einzeln.",
    },
    "en": {
        "greeting": "order service",
        "ask": "Please tell me your order number.",
        "status": "ready on",
        "cost_question": "Would you like to know the cost?",
        "cost": "euros including VAT",
        "callback": "Would you like a call back?",
        "no": "no thanks",
        "yes": "yes please",
        "order": "one two",
        "not_found": "could not find order 999999",
        "fallback": "Sorry, that did not work just now.",
        "handoff": "I am connecting you with a colleague.",
        "reprompt": "Sorry, please say the digits one by one.",
    },
}


def _scenarios(language: str) -> list[dict[str, Any]]:
    t = _TEXT[language]
    opening = [{"contains": t["greeting"]}, {"contains": t["ask"]}, {"language": "flow"}]
    return [
        {
            "name": f"{language}: known order, no callback",
            "language": language,
            "turns": [
                {"say": t["order"], "expect": [{"contains": t["status"]}, {"contains": t["cost_question"]}]},
                {"say": t["yes"], "expect": [{"contains": t["cost"]}, {"contains": t["callback"]}]},
                {"say": t["no"]},
            ],
            "expect": {
                "opening": opening,
                "said": [{"language": "flow"}],
                "variables": {"order_number": "12", "wants_cost": True, "callback": False},
                "tool_calls": [{"tool": "order_lookup", "arguments": {"order_id": "12"}, "status": "ok"}],
                "outcome": "completed",
                "end_reason": "flow_completed",
                "ends_at": "goodbye",
                "no_signals": ["order_not_found", "tool_failure"],
                "turns": 3,
            },
        },
        {
            "name": f"{language}: known order with a callback",
            "language": language,
            "caller": "+4917612345678",
            "turns": [
                {"say": t["order"]},
                {"say": t["no"], "expect": [{"contains": t["callback"]}, {"not_contains": t["cost"]}]},
                {"say": t["yes"]},
            ],
            "expect": {
                "signals": ["callback_requested"],
                "ends_at": "goodbye_callback",
                "outcome": "completed",
            },
        },
        {
            "name": f"{language}: unknown order",
            "language": language,
            "line": "transferred",  # a phone call: the colleague answers
            "turns": [
                {"say": "999999", "expect": [{"contains": t["not_found"]}, {"contains": t["ask"]}]},
                {"say": "999998", "expect": [{"contains": t["handoff"]}]},
            ],
            "expect": {
                "signals": ["order_not_found"],
                "variables": {"attempts": 2},
                # the connector answered 404 twice: answered, not an error
                "tool_calls": [
                    {"tool": "order_lookup", "arguments": {"order_id": "999999"}, "status": "not_found"}
                ],
                "outcome": "transferred",
                "visits": ["say_not_found", "handoff"],
            },
        },
        {
            "name": f"{language}: connector outage",
            "language": language,
            "line": "transferred",
            "mocks": {
                "order_lookup": {"status": "error", "http_status": 503, "error": "connector unavailable"}
            },
            "turns": [
                {"say": t["order"], "expect": [{"contains": t["fallback"]}, {"contains": t["handoff"]}]}
            ],
            "expect": {
                "tool_calls": [{"tool": "order_lookup", "status": "error"}],
                "signals": ["tool_failure"],
                "outcome": "transferred",
                "ends_at": "handoff",
            },
        },
        {
            "name": f"{language}: caller does not answer",
            "language": language,
            "line": "transferred",
            "turns": [
                {"silence": True, "expect": [{"contains": t["reprompt"]}]},
                {"silence": True, "expect": [{"contains": t["reprompt"]}]},
                {"silence": True, "expect": [{"contains": t["handoff"]}]},
            ],
            "expect": {"no_tool_calls": ["order_lookup"], "outcome": "transferred"},
        },
    ]


def demo_scenarios() -> list[dict[str, Any]]:
    """The suite's scenarios: every case in German and in English (each sets its language)."""
    return _scenarios("de") + _scenarios("en")
