"""notification channels, rules, deliveries and their attempts

Revision ID: 0006d
Revises: 0005b
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006d"
down_revision: str | Sequence[str] | None = "0005b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notification_channels",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("type", sa.String(length=20), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("secrets", sa.JSON(), nullable=False),
        sa.Column("secret_hints", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_channels")),
        sa.UniqueConstraint(
            "organization_id", "name", name=op.f("uq_notification_channels_organization_id_name")
        ),
    )
    with op.batch_alter_table("notification_channels", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notification_channels_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("channel_id", sa.String(length=40), nullable=False),
        sa.Column("channel_type", sa.String(length=20), nullable=False),
        sa.Column("channel_name", sa.String(length=100), nullable=False),
        sa.Column("rule_id", sa.String(length=40), nullable=True),
        sa.Column("signal_id", sa.String(length=40), nullable=True),
        sa.Column("signal_type", sa.String(length=60), nullable=True),
        sa.Column("severity", sa.String(length=10), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_deliveries")),
    )
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notification_deliveries_channel_id"), ["channel_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_notification_deliveries_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(
            "ix_notification_deliveries_rule_id_signal_type", ["rule_id", "signal_type"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_notification_deliveries_signal_id"), ["signal_id"], unique=False)
        batch_op.create_index("ix_notification_deliveries_status", ["status"], unique=False)

    op.create_table(
        "notification_attempts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("delivery_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("detail", sa.String(length=1000), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["notification_deliveries.id"],
            name=op.f("fk_notification_attempts_delivery_id_notification_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_attempts")),
    )
    with op.batch_alter_table("notification_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_notification_attempts_delivery_id"), ["delivery_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_notification_attempts_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "notification_rules",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=True),
        sa.Column("signal_type", sa.String(length=60), nullable=False),
        sa.Column("min_severity", sa.String(length=10), nullable=False),
        sa.Column("channel_id", sa.String(length=40), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("throttle_minutes", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["channel_id"],
            ["notification_channels.id"],
            name=op.f("fk_notification_rules_channel_id_notification_channels"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_rules")),
    )
    with op.batch_alter_table("notification_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_notification_rules_channel_id"), ["channel_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_notification_rules_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("notification_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notification_rules_organization_id"))
        batch_op.drop_index(batch_op.f("ix_notification_rules_channel_id"))

    op.drop_table("notification_rules")
    with op.batch_alter_table("notification_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notification_attempts_organization_id"))
        batch_op.drop_index(batch_op.f("ix_notification_attempts_delivery_id"))

    op.drop_table("notification_attempts")
    with op.batch_alter_table("notification_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_notification_deliveries_status")
        batch_op.drop_index(batch_op.f("ix_notification_deliveries_signal_id"))
        batch_op.drop_index("ix_notification_deliveries_rule_id_signal_type")
        batch_op.drop_index(batch_op.f("ix_notification_deliveries_organization_id"))
        batch_op.drop_index(batch_op.f("ix_notification_deliveries_channel_id"))

    op.drop_table("notification_deliveries")
    with op.batch_alter_table("notification_channels", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notification_channels_organization_id"))

    op.drop_table("notification_channels")
