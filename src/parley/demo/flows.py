"""The reference agent: "where is my car?" — greet, take the order number, look it up through the order
connector, tell status and ready date (the cost when asked), offer a callback, say goodbye. One
definition speaks German and English (``language`` picks); docs/flows.md shows it and explains every
node. The connector's values are German: ``in_english`` says them in English."""

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
        "wants_cost": None,
        "attempts": 0,
        # A date is said as "28 November" / "28. November": an ISO date read aloud takes seconds.
        "month_names": {
            "en": [
                "January",
                "February",
                "March",
                "April",
                "May",
                "June",
                "July",
                "August",
                "September",
                "October",
                "November",
                "December",
            ],
            "de": [
                "Januar",
                "Februar",
                "März",
                "April",
                "Mai",
                "Juni",
                "Juli",
                "August",
                "September",
                "Oktober",
                "November",
                "Dezember",
            ],
        },
        # Every project_status, station_state and parts_status value of the order connector
        # (docs/connector.md), as the English agent says them.
        "in_english": {
            "Angenommen": "booked in",
            "In Reparatur": "in repair",
            "Wartet auf Teile": "waiting for parts",
            "Fertig, wartet auf Abholung": "ready for pick-up",
            "Ausgeliefert": "delivered",
            "Warteschlange": "in the queue",
            "Karosserie": "in the body shop",
            "Lackierung": "in the paint shop",
            "Mechanik": "with the mechanics",
            "Montage": "being reassembled",
            "Qualitätskontrolle": "in the quality check",
            "Abholbereit": "ready for pick-up",
            "Abgeschlossen": "closed",
            "Teile bestellt": "parts ordered",
            "Teilweise geliefert": "some parts delivered",
            "Vollständig": "all parts in",
            "Nicht benötigt": "no parts needed",
        },
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
                "{% set o = order.order %}{% set day = o.finish_date[8:10] | int %}"
                "{% set month = o.finish_date[5:7] | int %}{% if language == 'en' %}Your {{ o.manufacturer_name }} "
                "{{ o.model_name }}: {{ in_english[o.project_status] | default(o.project_status) }}, ready on "
                "{{ day }} {{ month_names.en[month - 1] }}.{% else %}Ihr {{ o.manufacturer_name }} {{ o.model_name }}: "
                "{{ o.project_status }}, fertig am {{ day }}. {{ month_names.de[month - 1] }}.{% endif %}"
            ),
            "next": "offer_cost",
        },
        {
            "id": "offer_cost",
            "type": "collect",
            "variable": "wants_cost",
            "kind": "yes_no",
            "prompt": (
                "{% if language == 'en' %}Would you like to know the cost?"
                "{% else %}Möchten Sie die Kosten wissen?{% endif %}"
            ),
            "max_retries": 1,
            "on_failure": "offer_callback",
            "next": "cost_branch",
        },
        {
            "id": "cost_branch",
            "type": "branch",
            "conditions": [{"when": "wants_cost == True", "next": "say_cost"}],
            "default": "offer_callback",
        },
        {
            "id": "say_cost",
            "type": "say",
            "text": (
                "{% set o = order.order %}{% if language == 'en' %}{{ o.total_gross_cost }} euros including "
                "VAT; {{ in_english[o.parts_status] | default(o.parts_status) }}."
                "{% else %}{{ o.total_gross_cost }} Euro brutto; Teile: {{ o.parts_status }}.{% endif %}"
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
