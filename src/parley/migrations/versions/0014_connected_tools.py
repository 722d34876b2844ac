"""connected tools: a refresh lease and version on integration connections; speech usage may be unmeasured

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("integration_connections", schema=None) as batch_op:
        # bumped by every refresh claim and every store: the optimistic check of the refresh
        batch_op.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="0"))
        # while set and in the future, one process is talking to the provider for this connection
        batch_op.add_column(sa.Column("refresh_lease_until", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("calls", schema=None) as batch_op:
        # null: not measured (a text channel speaks and hears nothing)
        batch_op.alter_column("tts_characters", existing_type=sa.Integer(), nullable=True)
        batch_op.alter_column("stt_seconds", existing_type=sa.Float(), nullable=True)


def downgrade() -> None:
    op.execute("UPDATE calls SET tts_characters = 0 WHERE tts_characters IS NULL")
    op.execute("UPDATE calls SET stt_seconds = 0 WHERE stt_seconds IS NULL")
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.alter_column("stt_seconds", existing_type=sa.Float(), nullable=False)
        batch_op.alter_column("tts_characters", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("integration_connections", schema=None) as batch_op:
        batch_op.drop_column("refresh_lease_until")
        batch_op.drop_column("version")
