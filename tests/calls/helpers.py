"""Realistic call records for tests (the conversation runtime's tests may use them too)."""

from __future__ import annotations

import io
import math
import struct
import wave
from datetime import UTC, datetime, timedelta
from typing import Any

from parley.calls.contracts import (
    CallRecordIn,
    SignalRecord,
    ToolCallRecord,
    TurnMetrics,
    TurnRecord,
    UsageRecord,
)

START = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


def turns(*lines: tuple[str, str], start: datetime = START, gap: float = 4.0) -> list[TurnRecord]:
    """Transcript turns from ``("caller"|"agent", text)`` pairs, ``gap`` seconds apart."""
    return [
        TurnRecord(
            index=i,
            speaker=speaker,  # type: ignore[arg-type]
            text=text,
            at=start + timedelta(seconds=gap * i),
            node_id="n_say" if speaker == "agent" else None,
            engine_ms=12.5 if speaker == "agent" else None,
        )
        for i, (speaker, text) in enumerate(lines)
    ]


def order_lookup(
    *,
    order: str = "A-1001",
    status: str = "ok",
    http_status: int | None = 200,
    result: Any = None,
    at: datetime = START,
) -> ToolCallRecord:
    return ToolCallRecord(
        tool_id="tool_01ORDERLOOKUP",
        tool_name="order_lookup",
        node_id="n_lookup",
        arguments={"order_number": order},
        status=status,  # type: ignore[arg-type]
        http_status=http_status,
        latency_ms=84.0,
        result=result if result is not None else {"success": True, "status": "shipped"},
        error=None if status == "ok" else "upstream failed",
        at=at + timedelta(seconds=6),
    )


HAPPY_TRANSCRIPT = (
    ("agent", "Guten Tag, hier ist der Bestellservice. Wie kann ich helfen?"),
    ("caller", "Ich möchte wissen, wo meine Bestellung A-1001 ist."),
    ("agent", "Ihre Bestellung A-1001 wurde gestern verschickt."),
    ("caller", "Prima, danke schön."),
    ("agent", "Gern geschehen. Auf Wiederhören!"),
)


def make_record(organization_id: str, **overrides: Any) -> CallRecordIn:
    """A completed German phone call that looks up an order: no rule fires on it."""
    start: datetime = overrides.pop("started_at", START)
    lines = overrides.pop("lines", HAPPY_TRANSCRIPT)
    transcript = turns(*lines, start=start)
    data: dict[str, Any] = {
        "organization_id": organization_id,
        "session_id": "ses_01TEST",
        "flow_id": "flow_01ORDERS",
        "flow_version": 3,
        "channel": "phone",
        "direction": "inbound",
        "caller": "+4930123456",
        "callee": "+4930999000",
        "language": "de",
        "started_at": start,
        "ended_at": start + timedelta(seconds=95.2),
        "outcome": "completed",
        "end_reason": "caller_hung_up",
        "transcript": transcript,
        "tool_calls": [order_lookup(at=start)],
        "turn_metrics": [
            TurnMetrics(
                turn_index=t.index, engine_ms=12.5, tool_ms=84.0, voice_to_voice_ms=700.0 + 100 * t.index
            )
            for t in transcript
            if t.speaker == "agent"
        ],
        "usage": UsageRecord(
            llm_prompt_tokens=420, llm_completion_tokens=64, tts_characters=180, stt_seconds=21.5
        ),
        "signals": [],
        "variables": {"order_number": "A-1001"},
        "recording_filename": None,
        "transferred_to": None,
    }
    data.update(overrides)
    return CallRecordIn(**data)


def flow_signal(type_: str = "vip_customer", severity: str = "info", at: datetime = START) -> SignalRecord:
    return SignalRecord(type=type_, severity=severity, details={"reason": "flagged by flow"}, at=at)  # type: ignore[arg-type]


def wav_bytes(seconds: float = 0.25, rate: int = 8000) -> bytes:
    """A small mono 16-bit WAV with a 440 Hz tone."""
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
        for i in range(int(seconds * rate))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return buffer.getvalue()
