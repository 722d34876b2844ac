"""conversation sessions (the runtime's live state)

Revision ID: 0005a
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005a"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_sessions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("flow_version", sa.Integer(), nullable=True),
        sa.Column("channel", sa.String(length=20), nullable=False),
        sa.Column("voiced", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("end_reason", sa.String(length=60), nullable=True),
        sa.Column("caller", sa.String(length=40), nullable=True),
        sa.Column("callee", sa.String(length=40), nullable=True),
        sa.Column("language", sa.String(length=10), nullable=True),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_activity_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_sessions")),
    )
    with op.batch_alter_table("conversation_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_conversation_sessions_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_conversation_sessions_last_activity_at"), ["last_activity_at"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_conversation_sessions_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_conversation_sessions_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("conversation_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_conversation_sessions_status"))
        batch_op.drop_index(batch_op.f("ix_conversation_sessions_organization_id"))
        batch_op.drop_index(batch_op.f("ix_conversation_sessions_last_activity_at"))
        batch_op.drop_index(batch_op.f("ix_conversation_sessions_flow_id"))
    op.drop_table("conversation_sessions")
