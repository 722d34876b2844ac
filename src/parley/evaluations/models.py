"""Suites (a dataset marked as a test suite), runs and one result row per scenario of a run.

Flow and dataset ids are kept as plain strings, not foreign keys: a run outlives the flow or the
dataset it ran (its scenarios are copied into its result rows), and a flow deleted mid-run must be
reported by the run, not cascade it away.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime, utcnow


class EvaluationSuite(OrgScopedMixin, TimestampMixin, Base):
    __tablename__ = "evaluation_suites"

    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)
    flow_id: Mapped[str | None] = mapped_column(String(40), index=True)
    required_for_publish: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)


class EvaluationRun(OrgScopedMixin, Base):
    __tablename__ = "evaluation_runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(String(40), index=True, nullable=False)
    suite_name: Mapped[str] = mapped_column(String(200), nullable=False)
    suite_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    flow_id: Mapped[str] = mapped_column(String(40), index=True, nullable=False)
    flow_name: Mapped[str] = mapped_column(String(200), nullable=False)
    flow_version: Mapped[int | None] = mapped_column(Integer)  # None: the draft
    definition_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    mode: Mapped[str] = mapped_column(String(10), nullable=False, default="text")
    # queued -> running -> completed | cancelled
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="queued")
    passed: Mapped[bool | None] = mapped_column(Boolean)
    total: Mapped[int] = mapped_column(Integer, nullable=False)
    chunks: Mapped[int] = mapped_column(Integer, nullable=False)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    created_by: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class EvaluationResult(OrgScopedMixin, Base):
    __tablename__ = "evaluation_results"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    run_id: Mapped[str] = mapped_column(
        ForeignKey("evaluation_runs.id", ondelete="CASCADE"), index=True, nullable=False
    )
    item_id: Mapped[str] = mapped_column(String(40), nullable=False)
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    chunk: Mapped[int] = mapped_column(Integer, nullable=False)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    scenario: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # pending -> passed | failed | skipped | error
    status: Mapped[str] = mapped_column(String(10), nullable=False, default="pending")
    reason: Mapped[str | None] = mapped_column(Text)
    failures: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    tool_calls: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    turns: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    signals: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    rubric: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    variables: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    outcome: Mapped[str | None] = mapped_column(String(20))
    end_reason: Mapped[str | None] = mapped_column(String(60))
    duration_ms: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
