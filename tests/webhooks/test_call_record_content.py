"""What the turn that ends a conversation stores and sends, field by field: the call record as the API
answers it (GET /api/calls/{id}), its brain signal, and the ``call.ended`` and ``signal.raised`` events.

The expected values are what the ORM path (``record_call`` building a ``Call`` object and flushing it)
stored and sent; the one-INSERT path must store and send the same. Only what differs from run to run
(ids, times, measured milliseconds) is checked for its form and its links instead of its value."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tests.notifications.conftest import Receiver
from tests.webhooks.conftest import CALLBACK_FLOW, Platform, unique
from tests.webhooks.test_events import events

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
VARIES = {"id", "session_id", "flow_id", "started_at", "ended_at", "created_at", "analyzed_at"}

EXPECTED_CALL: dict[str, Any] = {
    "flow_version": 1,
    "channel": "phone",
    "direction": "inbound",
    "caller": None,
    "outcome": "completed",
    "signal_types": ["callback_requested"],
    "turn_count": 5,
    "mean_voice_latency_ms": None,
    "recording_filename": None,
    "analysis_status": "done",
    "summary": (
        "Inbound phone call, N s, 5 turns, outcome completed (flow_completed). The caller first said: "
        '"Ja bitte". Collected: callback_requested=True, preferred_time=morgen um 10 Uhr.'
    ),
    "extracted": {"callback_requested": True, "preferred_time": "morgen um 10 Uhr", "topic": None},
    "callee": None,
    "language": "de",
    "end_reason": "flow_completed",
    "transferred_to": None,
    "transferred_at": None,
    "transfer_status": None,
    "transcript": [
        {"index": 0, "speaker": "agent", "text": "Sollen wir Sie zurückrufen?", "node_id": "ask"},
        {"index": 1, "speaker": "caller", "text": "Ja bitte", "node_id": "ask"},
        {"index": 2, "speaker": "agent", "text": "Wann?", "node_id": "when"},
        {"index": 3, "speaker": "caller", "text": "morgen um 10 Uhr", "node_id": "when"},
        {"index": 4, "speaker": "agent", "text": "Danke, auf Wiederhören.", "node_id": "bye"},
    ],
    "tool_calls": [],
    "turn_metrics": [{"turn_index": 0}, {"turn_index": 1}, {"turn_index": 2}],
    "usage": {
        "llm_prompt_tokens": 0,
        "llm_completion_tokens": 0,
        "tts_characters": None,
        "stt_seconds": None,
    },
    "variables": {
        "callback_requested": True,
        "preferred_time": "morgen um 10 Uhr",
        "caller_number": None,
        "called_number": None,
        "session_id": "SESSION",
        "channel": "phone",
        "language": "de",
        "last_user_message": "morgen um 10 Uhr",
    },
    "signals": [{"type": "callback_requested", "severity": "medium", "status": "open"}],
    "recording_url": None,
    "analysis_method": "variables",
}


def _time(value: Any) -> datetime:
    assert isinstance(value, str) and TIME.match(value), value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _steady(call: dict[str, Any]) -> dict[str, Any]:
    """The call without what varies from run to run, each varying part checked for its form."""
    steady = {k: v for k, v in call.items() if k not in VARIES | {"duration_seconds"}}
    assert call["id"].startswith("call_") and call["session_id"].startswith("ses_")
    started, ended = _time(call["started_at"]), _time(call["ended_at"])
    assert started <= ended <= _time(call["created_at"]) <= _time(call["analyzed_at"])
    assert call["duration_seconds"] == (ended - started).total_seconds()
    turns = []
    for turn in call["transcript"]:
        assert started <= _time(turn["at"]) <= ended
        engine_ms = turn["engine_ms"]
        assert (engine_ms is None) == (turn["speaker"] == "caller") and (engine_ms or 0) >= 0
        turns.append({k: v for k, v in turn.items() if k not in ("at", "engine_ms")})
    steady["transcript"] = turns
    metrics = []
    for entry in call["turn_metrics"]:
        assert entry["engine_ms"] >= 0
        assert all(v is None for k, v in entry.items() if k not in ("turn_index", "engine_ms"))
        metrics.append({"turn_index": entry["turn_index"]})
    steady["turn_metrics"] = metrics
    signals = []
    for signal in call["signals"]:
        assert signal["id"].startswith("sig_")
        signals.append({k: v for k, v in signal.items() if k != "id"})
    steady["signals"] = signals
    assert call["variables"]["session_id"] == call["session_id"]
    steady["variables"] = {**call["variables"], "session_id": "SESSION"}
    # the digest says how long the call took, in whole seconds
    steady["summary"] = re.sub(r", \d+ s, ", ", N s, ", call["summary"])
    return steady


async def test_the_ended_conversations_record_and_events_are_what_they_were(
    platform: Platform, receiver: Receiver
) -> None:
    path = unique("record")
    await platform.subscribe(f"{receiver.url}{path}", "call.ended", "signal.raised")
    flow_id = await platform.flow(CALLBACK_FLOW)
    session_id = await platform.converse(flow_id, "Ja bitte", "morgen um 10 Uhr")

    listed = await platform.get("/api/calls")
    [summary] = listed.json()["items"]
    response = await platform.get(f"/api/calls/{summary['id']}")
    assert response.status_code == 200, response.text
    call = response.json()
    assert (call["session_id"], call["flow_id"]) == (session_id, flow_id)
    assert _steady(call) == EXPECTED_CALL
    # the list item is the same record
    assert summary == {k: call[k] for k in summary}

    received = {e["type"]: e["data"] for e in events(receiver, path)}
    assert sorted(received) == ["call.ended", "signal.raised"]
    ended = received["call.ended"]
    assert ended == {
        "call_id": call["id"],
        "session_id": session_id,
        "flow_id": flow_id,
        "flow_version": 1,
        "channel": "phone",
        "direction": "inbound",
        "caller": None,
        "callee": None,
        "started_at": call["started_at"],
        "ended_at": call["ended_at"],
        "duration_seconds": call["duration_seconds"],
        "outcome": "completed",
        "end_reason": "flow_completed",
        "transferred_to": None,
        "transfer_status": None,
        "language": "de",
        "transcript": call["transcript"],
        "variables": call["variables"],
        "tool_calls": [],
        "signal_types": ["callback_requested"],
        "metrics": {
            "turn_count": 5,
            "mean_voice_latency_ms": None,
            "turns": call["turn_metrics"],
            "usage": call["usage"],
        },
        "recording_url": None,
    }
    [signal] = call["signals"]
    raised = received["signal.raised"]
    assert _time(call["started_at"]) <= _time(raised.pop("occurred_at"))
    assert raised == {
        "signal_id": signal["id"],
        "type": "callback_requested",
        "severity": "medium",
        "source": "flow",
        "status": "open",
        "call_id": call["id"],
        "flow_id": flow_id,
        "details": {"node": "flag"},
    }
