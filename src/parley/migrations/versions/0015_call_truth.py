"""call truth: sessions carry their direction; a voice call's call.ended waits for its voice facts

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversation_sessions", schema=None) as batch_op:
        # inbound (someone reached the agent) | outbound (the platform dialled: API or campaign)
        batch_op.add_column(
            sa.Column("direction", sa.String(length=10), nullable=False, server_default="inbound")
        )
        # a voice transport (WebSocket, Twilio media) has connected: it attaches the voice facts
        batch_op.add_column(
            sa.Column("voice_connected", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("calls", schema=None) as batch_op:
        # true while a voice call's call.ended waits for the transport's recording, metrics and usage
        batch_op.add_column(
            sa.Column("ended_event_pending", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_column("ended_event_pending")
    with op.batch_alter_table("conversation_sessions", schema=None) as batch_op:
        batch_op.drop_column("voice_connected")
        batch_op.drop_column("direction")
