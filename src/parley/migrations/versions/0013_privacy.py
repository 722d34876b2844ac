"""privacy settings per organization: redaction, retention, recording notice

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "privacy_settings",
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("redaction_enabled", sa.Boolean(), nullable=False),
        sa.Column("redaction_kinds", sa.JSON(), nullable=False),
        sa.Column("replacements", sa.JSON(), nullable=False),
        sa.Column("custom_patterns", sa.JSON(), nullable=False),
        sa.Column("retention_days", sa.Integer(), nullable=True),
        sa.Column("recording_notice", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_privacy_settings")),
    )


def downgrade() -> None:
    op.drop_table("privacy_settings")
