from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.calls.service import record_call
from tests.calls.helpers import START, flow_signal, make_record, order_lookup

ORG = "org_01RECORDTEST"


async def _types(session: AsyncSession, call: Call) -> list[str]:
    rows = await session.scalars(select(BrainSignal.type).where(BrainSignal.call_id == call.id))
    return sorted(rows)


async def test_record_call_stores_everything(db_session: AsyncSession) -> None:
    record = make_record(ORG, signals=[flow_signal()], recording_filename="call-0001.wav")
    call = await record_call(db_session, record)
    await db_session.commit()
    stored = await db_session.get(Call, call.id)
    assert stored is not None
    assert stored.id.startswith("call_")
    assert (stored.organization_id, stored.channel, stored.direction) == (ORG, "phone", "inbound")
    assert (stored.caller, stored.callee, stored.language) == ("+4930123456", "+4930999000", "de")
    assert (stored.flow_id, stored.flow_version, stored.outcome) == ("flow_01ORDERS", 3, "completed")
    assert stored.started_at == START
    assert stored.duration_seconds == 95.2
    assert stored.turn_count == 5
    assert stored.transcript[1]["text"].startswith("Ich möchte wissen")
    assert stored.transcript[1]["at"] == (START + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")
    assert stored.tool_calls[0]["arguments"] == {"order_number": "A-1001"}
    assert stored.tool_calls[0]["latency_ms"] == 84.0
    assert [m["voice_to_voice_ms"] for m in stored.turn_metrics] == [700.0, 900.0, 1100.0]
    assert stored.mean_voice_latency_ms == 900.0
    assert (stored.llm_prompt_tokens, stored.llm_completion_tokens) == (420, 64)
    assert (stored.tts_characters, stored.stt_seconds) == (180, 21.5)
    assert stored.recording_filename == "call-0001.wav"
    assert stored.blob_key == f"{ORG}/recordings/call-0001.wav"
    assert stored.has_signals and stored.signal_types == ["vip_customer"]
    signal = await db_session.scalar(select(BrainSignal).where(BrainSignal.call_id == call.id))
    assert signal is not None
    assert (signal.type, signal.severity, signal.status, signal.source) == (
        "vip_customer",
        "info",
        "open",
        "flow",
    )
    assert signal.flow_id == "flow_01ORDERS"


async def test_a_clean_call_raises_no_signal(db_session: AsyncSession) -> None:
    call = await record_call(db_session, make_record(ORG))
    assert await _types(db_session, call) == []
    assert not call.has_signals


async def test_a_taken_or_malformed_recording_name_is_left_out(db_session: AsyncSession) -> None:
    first = await record_call(db_session, make_record(ORG, recording_filename="same.wav"))
    second = await record_call(db_session, make_record(ORG, recording_filename="same.wav"))
    third = await record_call(db_session, make_record(ORG, recording_filename="../etc/passwd.wav"))
    assert first.recording_filename == "same.wav"
    assert second.recording_filename is None and third.recording_filename is None


async def test_a_troubled_call_raises_exactly_its_signals(db_session: AsyncSession) -> None:
    lines = (
        ("agent", "Guten Tag, wie kann ich helfen?"),
        ("caller", "Wo ist meine Bestellung A-9999?"),
        ("agent", "Einen Moment bitte."),
        ("caller", "Wo ist meine Bestellung A-9999?"),
        ("agent", "Die Bestellung wurde nicht gefunden."),
        (
            "caller",
            "Das ist unverschämt. Ich will mit einem Mitarbeiter sprechen, oder rufen Sie mich zurück.",
        ),
    )
    lookup = order_lookup(order="A-9999", status="error", http_status=404, result={"detail": "Not found"})
    record = make_record(
        ORG, lines=lines, tool_calls=[lookup], outcome="transferred", transferred_to="+49301"
    )
    call = await record_call(db_session, record)
    assert await _types(db_session, call) == [
        "callback_requested",
        "caller_repeats",
        "negative_sentiment",
        "order_not_found",
        "tool_failure",
        "transfer_requested",
    ]
    assert call.signal_types == await _types(db_session, call)
    rows = await db_session.scalars(select(BrainSignal).where(BrainSignal.call_id == call.id))
    by_type = {s.type: s for s in rows}
    assert by_type["tool_failure"].severity == "high"
    assert by_type["order_not_found"].details["lookups"][0]["arguments"] == {"order_number": "A-9999"}
    assert by_type["caller_repeats"].details["repeats"][0]["turn_indexes"] == [1, 3]
    assert all(s.source == "rule" and s.status == "open" for s in by_type.values())


async def test_over_long_texts_are_cut_to_fit(db_session: AsyncSession) -> None:
    record = make_record(
        ORG,
        caller="+49\x00" + "1" * 300,
        end_reason="x" * 900,
        language="de-DE-" + "x" * 40,
        variables={"when": START, "items": ("a", "b")},
        lines=(("agent", "Hallo"), ("caller", "Null\x00Byte")),
    )
    call = await record_call(db_session, record)
    await db_session.commit()
    stored = await db_session.get(Call, call.id)
    assert stored is not None
    assert stored.caller == "+49" + "1" * 197
    assert stored.end_reason is not None and len(stored.end_reason) == 500
    assert stored.variables == {"when": "2026-03-02T09:00:00Z", "items": ["a", "b"]}
    assert stored.transcript[1]["text"] == "Null\x00Byte"
