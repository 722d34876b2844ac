"""What a notification says: the facts stored with a delivery, rendered into a title, text and JSON.

The facts are fixed when the delivery is created (a snapshot of the signal), and rendering is a pure
function of them and the platform's public URL, so every attempt sends the same message.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class RaisedSignal(Protocol):
    """What notifications read of a signal the brain hands over (the brain's row satisfies it), so
    notifications never import the brain: the brain calls notifications, never the reverse."""

    @property
    def id(self) -> str: ...
    @property
    def organization_id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def flow_id(self) -> str | None: ...
    @property
    def occurred_at(self) -> datetime: ...
    @property
    def details(self) -> dict[str, Any]: ...


SIGNAL_EVENT = "brain_signal.raised"
TEST_EVENT = "notification.test"
_SUMMARY_KEYS = ("summary", "reason", "message", "text", "note")
_SUMMARY_LENGTH = 300


def summarize(details: dict[str, Any]) -> str:
    """One readable line from a signal's details."""
    for key in _SUMMARY_KEYS:
        value = details.get(key)
        if isinstance(value, str) and value.strip():
            return _cut(value.strip())
    parts: list[str] = []
    for key, value in details.items():
        if isinstance(value, bool | int | float) or (isinstance(value, str) and value):
            parts.append(f"{key}: {value}")
        elif isinstance(value, list):
            parts.append(f"{key}: {len(value)}")
    return _cut("; ".join(parts)) if parts else "No further details."


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY_LENGTH else text[: _SUMMARY_LENGTH - 1] + "…"


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def signal_facts(signal: RaisedSignal) -> dict[str, Any]:
    return {
        "event": SIGNAL_EVENT,
        "organization_id": signal.organization_id,
        "signal": {
            "id": signal.id,
            "type": signal.type,
            "severity": signal.severity,
            "status": signal.status,
            "source": signal.source,
            "call_id": signal.call_id,
            "flow_id": signal.flow_id,
            "occurred_at": _iso(signal.occurred_at),
            "summary": summarize(signal.details or {}),
            "details": signal.details or {},
        },
    }


def test_facts(organization_id: str, channel_name: str) -> dict[str, Any]:
    return {"event": TEST_EVENT, "organization_id": organization_id, "channel": channel_name, "signal": None}


def humanize(signal_type: str) -> str:
    return signal_type.replace("_", " ").strip().capitalize() or "Signal"


@dataclass(frozen=True)
class Rendered:
    title: str
    text: str
    link: str | None
    payload: dict[str, Any]


def render(facts: dict[str, Any], delivery_id: str, created_at: datetime, base_url: str) -> Rendered:
    base = base_url.rstrip("/")
    signal = facts.get("signal")
    links: dict[str, str | None] = {"signal": None, "call": None}
    if signal is None:
        title = "Parley test notification"
        text = (
            f"This is a test message for the notification channel {facts.get('channel')!r}. "
            "If you can read it, the channel works."
        )
    else:
        links["signal"] = f"{base}/api/brain/signals/{signal['id']}"
        if signal.get("call_id"):
            links["call"] = f"{base}/api/calls/{signal['call_id']}"
        title = f"[{signal['severity'].upper()}] {humanize(signal['type'])}"
        lines = [
            f"Type: {signal['type']}",
            f"Severity: {signal['severity']}",
            f"Occurred: {signal['occurred_at']}",
            f"Summary: {signal['summary']}",
        ]
        if links["call"]:
            lines.append(f"Call: {signal['call_id']} — {links['call']}")
        lines.append(f"Signal: {links['signal']}")
        text = "\n".join(lines)
    payload = {
        "id": delivery_id,
        "event": facts["event"],
        "created_at": _iso(created_at),
        "organization_id": facts["organization_id"],
        "title": title,
        "text": text,
        "signal": signal,
        "links": links,
    }
    return Rendered(title, text, links["call"] or links["signal"], payload)
