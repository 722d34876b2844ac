from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, Integer, String, Text
from sqlalchemy import false as sa_false
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime


class Call(OrgScopedMixin, TimestampMixin, Base):
    """One ended conversation: who, when, how it ended, what was said and done, and what it cost.

    The id is a ULID taken from ``started_at``, so "newest first" by id is newest first by start.
    Filter columns are real columns; the transcript, tool calls and metrics are JSON.
    """

    __tablename__ = "calls"
    __table_args__ = (
        Index("ix_calls_organization_id_started_at", "organization_id", "started_at"),
        # the list's order (newest first by id, keyset pages): walked, never sorted (migration 0016)
        Index("ix_calls_organization_id_id", "organization_id", "id"),
        Index("ix_calls_organization_id_caller_id", "organization_id", "caller", "id"),
        # the outcome filter's walk: only the calls with that outcome (migration 0017)
        Index("ix_calls_organization_id_outcome_id", "organization_id", "outcome", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(80), nullable=False)
    flow_id: Mapped[str | None] = mapped_column(String(40), index=True)
    flow_version: Mapped[int | None] = mapped_column(Integer)
    channel: Mapped[str] = mapped_column(String(20), nullable=False)
    direction: Mapped[str] = mapped_column(String(20), nullable=False)
    caller: Mapped[str | None] = mapped_column(String(200))
    callee: Mapped[str | None] = mapped_column(String(200))
    language: Mapped[str | None] = mapped_column(String(20))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    ended_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    duration_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    outcome: Mapped[str] = mapped_column(String(20), nullable=False)
    end_reason: Mapped[str | None] = mapped_column(String(500))
    transferred_to: Mapped[str | None] = mapped_column(String(200))
    transferred_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    transfer_status: Mapped[str | None] = mapped_column(String(20))
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    tool_calls: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    turn_metrics: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    turn_count: Mapped[int] = mapped_column(Integer, nullable=False)
    mean_voice_latency_ms: Mapped[float | None] = mapped_column(Float)
    llm_prompt_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    llm_completion_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    # None: not measured (no speech on the channel); a voice call's figures come from its pipeline
    tts_characters: Mapped[int | None] = mapped_column(Integer)
    stt_seconds: Mapped[float | None] = mapped_column(Float)
    # A voice call's ``call.ended`` waits for what the transport attaches after the record is written
    # (recording, voice metrics, speech usage): true until it has been published (attach_voice, or
    # the calls.publish_ended job when the transport never reports).
    ended_event_pending: Mapped[bool] = mapped_column(
        Boolean, nullable=False, default=False, server_default=sa_false()
    )
    has_signals: Mapped[bool] = mapped_column(Boolean, nullable=False)
    signal_types: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    recording_filename: Mapped[str | None] = mapped_column(String(200), unique=True)
    # Where the recording's bytes live in blob storage (named blob_key so deleting the organization
    # removes the file too).
    blob_key: Mapped[str | None] = mapped_column(String(900))
    # Post-call analysis (parley.calls.analysis): null when the flow declares none.
    analysis_status: Mapped[str | None] = mapped_column(String(20))  # pending | done | failed
    analysis_method: Mapped[str | None] = mapped_column(String(20))  # llm | variables
    summary: Mapped[str | None] = mapped_column(Text)
    extracted: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # name -> the value's canonical text (lower-case; "true"/"false"; numbers without ".0"), what
    # the call list's ``analysis.<name>=`` filter compares on SQLite and PostgreSQL alike.
    extracted_index: Mapped[dict[str, str] | None] = mapped_column(JSON)
    analyzed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
