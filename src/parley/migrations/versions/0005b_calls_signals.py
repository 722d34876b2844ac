"""call records and brain signals

Revision ID: 0005b
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005b"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calls",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("session_id", sa.String(length=80), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("flow_version", sa.Integer(), nullable=True),
        sa.Column("channel", sa.String(length=20), nullable=False),
        sa.Column("direction", sa.String(length=20), nullable=False),
        sa.Column("caller", sa.String(length=200), nullable=True),
        sa.Column("callee", sa.String(length=200), nullable=True),
        sa.Column("language", sa.String(length=20), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_seconds", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("end_reason", sa.String(length=500), nullable=True),
        sa.Column("transferred_to", sa.String(length=200), nullable=True),
        sa.Column("transcript", sa.JSON(), nullable=False),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
        sa.Column("turn_metrics", sa.JSON(), nullable=False),
        sa.Column("variables", sa.JSON(), nullable=False),
        sa.Column("turn_count", sa.Integer(), nullable=False),
        sa.Column("mean_voice_latency_ms", sa.Float(), nullable=True),
        sa.Column("llm_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("llm_completion_tokens", sa.Integer(), nullable=False),
        sa.Column("tts_characters", sa.Integer(), nullable=False),
        sa.Column("stt_seconds", sa.Float(), nullable=False),
        sa.Column("has_signals", sa.Boolean(), nullable=False),
        sa.Column("signal_types", sa.JSON(), nullable=False),
        sa.Column("recording_filename", sa.String(length=200), nullable=True),
        sa.Column("blob_key", sa.String(length=900), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calls")),
        sa.UniqueConstraint("recording_filename", name=op.f("uq_calls_recording_filename")),
    )
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_calls_organization_id"), ["organization_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_calls_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            "ix_calls_organization_id_started_at", ["organization_id", "started_at"], unique=False
        )

    op.create_table(
        "brain_signals",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("call_id", sa.String(length=40), nullable=True),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("type", sa.String(length=60), nullable=False),
        sa.Column("severity", sa.String(length=10), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.String(length=2000), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=40), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.String(length=40), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["call_id"], ["calls.id"], name=op.f("fk_brain_signals_call_id_calls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_brain_signals")),
    )
    with op.batch_alter_table("brain_signals", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_brain_signals_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_brain_signals_call_id"), ["call_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_brain_signals_type"), ["type"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("brain_signals", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_brain_signals_type"))
        batch_op.drop_index(batch_op.f("ix_brain_signals_call_id"))
        batch_op.drop_index(batch_op.f("ix_brain_signals_organization_id"))
    op.drop_table("brain_signals")
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_index("ix_calls_organization_id_started_at")
        batch_op.drop_index(batch_op.f("ix_calls_flow_id"))
        batch_op.drop_index(batch_op.f("ix_calls_organization_id"))
    op.drop_table("calls")
