"""The reference agent: "where is my car?" — greet, take the order number, look it up through the order
connector, tell status, finish date and gross cost, offer a callback, say goodbye. One definition
speaks German and English (``language`` picks); docs/flows.md shows it and explains every node."""

from __future__ import annotations

import copy
from typing import Any

ORDER_STATUS_FLOW: dict[str, Any] = {
    "language": "de",
    "languages": ["en"],
    "voice": {
        "stt": {"provider": "pocketsphinx", "model": "de-DE"},
        "tts": {"provider": "espeak", "voice": "de"},
    },
    "prompt": (
        "{% if language == 'en' %}You are the friendly phone assistant of {{ shop_name }}."
        "{% else %}Du bist der freundliche Telefonassistent von {{ shop_name }}.{% endif %}"
    ),
    "variables": {
        "shop_name": "Autohaus Demo",
        "order_number": None,
        "order": None,
        "callback": None,
        "attempts": 0,
    },
    "start_node": "greet",
    "nodes": [
        {
            "id": "greet",
            "type": "say",
            "text": (
                "{% if language == 'en' %}Hello, this is the order service of {{ shop_name }}."
                "{% else %}Guten Tag, hier ist der Auftragsservice von {{ shop_name }}.{% endif %}"
            ),
            "next": "ask_order",
        },
        {
            "id": "ask_order",
            "type": "collect",
            "variable": "order_number",
            "kind": "digits",
            "min_length": 1,
            "max_length": 12,
            "prompt": (
                "{% if language == 'en' %}Please tell me your order number."
                "{% else %}Bitte nennen Sie mir Ihre Auftragsnummer.{% endif %}"
            ),
            "reprompt": (
                "{% if language == 'en' %}Sorry, please say the digits one by one."
                "{% else %}Bitte sagen Sie die Ziffern einzeln.{% endif %}"
            ),
            "max_retries": 2,
            "on_failure": "handoff",
            "next": "lookup",
        },
        {
            "id": "lookup",
            "type": "tool",
            "tool": "order_lookup",
            "arguments": {"order_id": "{{ order_number }}"},
            "result_variable": "order",
            "on_error": "lookup_failed",
            "next": "found",
        },
        {
            "id": "found",
            "type": "branch",
            "conditions": [{"when": "order.success", "next": "say_status"}],
            "default": "not_found",
        },
        {
            "id": "say_status",
            "type": "say",
            "text": (
                "{% set o = order.order %}{% if language == 'en' %}Your {{ o.manufacturer_name }} "
                "{{ o.model_name }} ({{ o.plate }}) is at status {{ o.project_status }}. Expected "
                "completion: {{ o.finish_date }}. Gross cost: {{ o.total_gross_cost }} euros."
                "{% else %}Ihr {{ o.manufacturer_name }} {{ o.model_name }} ({{ o.plate }}) hat den Status "
                "{{ o.project_status }}. Voraussichtliche Fertigstellung: {{ o.finish_date }}. Kosten "
                "brutto: {{ o.total_gross_cost }} Euro.{% endif %}"
            ),
            "next": "offer_callback",
        },
        {
            "id": "offer_callback",
            "type": "collect",
            "variable": "callback",
            "kind": "yes_no",
            "prompt": (
                "{% if language == 'en' %}Would you like a call back?"
                "{% else %}Möchten Sie einen Rückruf?{% endif %}"
            ),
            "max_retries": 1,
            "on_failure": "goodbye",
            "next": "callback_branch",
        },
        {
            "id": "callback_branch",
            "type": "branch",
            "conditions": [{"when": "callback == True", "next": "note_callback"}],
            "default": "goodbye",
        },
        {
            "id": "note_callback",
            "type": "signal",
            "signal_type": "callback_requested",
            "severity": "medium",
            "details": {"order_number": "{{ order_number }}", "caller": "{{ caller_number }}"},
            "next": "goodbye_callback",
        },
        {
            "id": "goodbye_callback",
            "type": "end",
            "text": (
                "{% if language == 'en' %}We will call you back. Goodbye!"
                "{% else %}Wir rufen Sie zurück. Auf Wiederhören!{% endif %}"
            ),
        },
        {
            "id": "not_found",
            "type": "signal",
            "signal_type": "order_not_found",
            "severity": "low",
            "details": {"order_number": "{{ order_number }}"},
            "next": "count_attempt",
        },
        {"id": "count_attempt", "type": "set", "assignments": {"attempts": "attempts + 1"}, "next": "retry"},
        {
            "id": "retry",
            "type": "branch",
            "conditions": [{"when": "attempts < 2", "next": "say_not_found"}],
            "default": "handoff",
        },
        {
            "id": "say_not_found",
            "type": "say",
            "text": (
                "{% if language == 'en' %}I could not find order {{ order_number }}."
                "{% else %}Ich finde den Auftrag {{ order_number }} leider nicht.{% endif %}"
            ),
            "next": "ask_order",
        },
        {
            "id": "lookup_failed",
            "type": "signal",
            "signal_type": "tool_failure",
            "severity": "high",
            "details": {"tool": "order_lookup"},
            "next": "handoff",
        },
        {
            "id": "handoff",
            "type": "transfer",
            "phone_number": "+4930123456",
            "message": (
                "{% if language == 'en' %}I am connecting you with a colleague."
                "{% else %}Ich verbinde Sie mit einem Kollegen.{% endif %}"
            ),
            "next": "goodbye",
        },
        {
            "id": "goodbye",
            "type": "end",
            "text": (
                "{% if language == 'en' %}Thank you for calling. Goodbye!"
                "{% else %}Vielen Dank für Ihren Anruf. Auf Wiederhören!{% endif %}"
            ),
        },
    ],
}


def order_status_flow(language: str = "de") -> dict[str, Any]:
    """A copy of the reference flow answering in ``language`` ("de" or "en")."""
    definition = copy.deepcopy(ORDER_STATUS_FLOW)
    definition["language"] = language
    definition["languages"] = [other for other in ("de", "en") if other != language]
    if language == "en":  # an English agent listens and speaks English (PocketSphinx's own US model)
        definition["voice"] = {
            "stt": {"provider": "pocketsphinx", "model": "en-US"},
            "tts": {"provider": "espeak", "voice": "en-us"},
        }
    return definition
