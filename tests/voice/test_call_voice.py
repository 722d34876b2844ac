"""``attach_voice``: the voice pipeline's figures and recording land on the ended session's call record."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from parley.calls.contracts import TurnMetrics
from parley.calls.service import attach_voice, record_call
from tests.calls.helpers import make_record

ORG = "org_01VOICEMETRICS"


async def test_voice_metrics_merge_by_turn_index_and_the_recording_is_named(db_session: AsyncSession) -> None:
    record = make_record(
        ORG,
        session_id="ses_voice_1",
        turn_metrics=[
            TurnMetrics(turn_index=0, engine_ms=3.0),
            TurnMetrics(turn_index=1, engine_ms=4.0, llm_first_token_ms=250.0),
        ],
    )
    await record_call(db_session, record)
    call = await attach_voice(
        db_session,
        ORG,
        "ses_voice_1",
        metrics=[
            {
                "turn_index": 1,
                "stt_final_ms": 120.0,
                "stt_engine_ms": 35.5,
                "engine_ms": 9.0,
                "llm_first_token_ms": 1.0,  # the runtime's own figure stays
                "tts_first_byte_ms": 20.0,
                "voice_to_voice_ms": 410.0,
                "interrupted": True,
            },
            {"turn_index": 2, "engine_ms": 5.0, "voice_to_voice_ms": 390.0, "interrupted": False},
            {"turn_index": None, "voice_to_voice_ms": 1.0},  # not a turn of the record: ignored
        ],
        recording_filename="ses_voice_1.wav",
    )
    await db_session.commit()
    assert call is not None
    first, second, third = call.turn_metrics
    assert first["voice_to_voice_ms"] is None and first["engine_ms"] == 3.0
    assert second["engine_ms"] == 4.0 and second["llm_first_token_ms"] == 250.0
    assert (second["stt_final_ms"], second["stt_engine_ms"], second["tts_first_byte_ms"]) == (
        120.0,
        35.5,
        20.0,
    )
    assert second["voice_to_voice_ms"] == 410.0 and second["interrupted"] is True
    assert third["turn_index"] == 2 and third["engine_ms"] == 5.0 and third["interrupted"] is False
    assert call.mean_voice_latency_ms == 400.0
    assert call.recording_filename == "ses_voice_1.wav"
    assert call.blob_key == f"{ORG}/recordings/ses_voice_1.wav"


async def test_no_call_record_no_change_and_a_taken_name_is_left_out(db_session: AsyncSession) -> None:
    assert await attach_voice(db_session, ORG, "ses_missing", metrics=[]) is None
    await record_call(db_session, make_record(ORG, session_id="ses_a", recording_filename="taken.wav"))
    await record_call(db_session, make_record(ORG, session_id="ses_b", recording_filename=None))
    call = await attach_voice(db_session, ORG, "ses_b", metrics=[], recording_filename="taken.wav")
    assert call is not None and call.recording_filename is None and call.blob_key is None
    other_org = await attach_voice(db_session, "org_01SOMEONEELSE", "ses_b", metrics=[])
    assert other_org is None
