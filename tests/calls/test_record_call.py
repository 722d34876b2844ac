from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.models import BrainSignal
from parley.calls.models import Call
from parley.calls.service import record_call
from tests.calls.helpers import START, flow_signal, make_record

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
