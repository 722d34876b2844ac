"""telephony numbers trunks dispatch rules

Revision ID: 0006a
Revises: 0005b
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006a"
down_revision: str | None = "0005b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "telephony_dispatch_rules",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("rule_type", sa.String(length=20), nullable=False),
        sa.Column("room_prefix", sa.String(length=120), nullable=True),
        sa.Column("room_name", sa.String(length=120), nullable=True),
        sa.Column("pin", sa.String(length=2000), nullable=True),
        sa.Column("pin_hint", sa.String(length=20), nullable=True),
        sa.Column("trunk_ids", sa.JSON(), nullable=False),
        sa.Column("numbers", sa.JSON(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("provider_id", sa.String(length=80), nullable=True),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telephony_dispatch_rules")),
        sa.UniqueConstraint(
            "organization_id", "name", name=op.f("uq_telephony_dispatch_rules_organization_id_name")
        ),
    )
    with op.batch_alter_table("telephony_dispatch_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_telephony_dispatch_rules_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_telephony_dispatch_rules_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "telephony_phone_numbers",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.String(length=20), nullable=False),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=True),
        sa.Column("flow_id", sa.String(length=40), nullable=True),
        sa.Column("provider_id", sa.String(length=80), nullable=True),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telephony_phone_numbers")),
        sa.UniqueConstraint("number", name=op.f("uq_telephony_phone_numbers_number")),
    )
    with op.batch_alter_table("telephony_phone_numbers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_telephony_phone_numbers_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_telephony_phone_numbers_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "telephony_sip_trunks",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("direction", sa.String(length=10), nullable=False),
        sa.Column("numbers", sa.JSON(), nullable=False),
        sa.Column("allowed_addresses", sa.JSON(), nullable=False),
        sa.Column("allowed_numbers", sa.JSON(), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=True),
        sa.Column("transport", sa.String(length=10), nullable=True),
        sa.Column("auth_username", sa.String(length=200), nullable=True),
        sa.Column("auth_password", sa.String(length=2000), nullable=True),
        sa.Column("auth_password_hint", sa.String(length=20), nullable=True),
        sa.Column("provider_id", sa.String(length=80), nullable=True),
        sa.Column("synced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telephony_sip_trunks")),
        sa.UniqueConstraint(
            "organization_id", "name", name=op.f("uq_telephony_sip_trunks_organization_id_name")
        ),
    )
    with op.batch_alter_table("telephony_sip_trunks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_telephony_sip_trunks_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "telephony_sync_leases",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=60), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telephony_sync_leases")),
        sa.UniqueConstraint("organization_id", name=op.f("uq_telephony_sync_leases_organization_id")),
    )
    with op.batch_alter_table("telephony_sync_leases", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_telephony_sync_leases_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "telephony_twilio_calls",
        sa.Column("call_sid", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=40), nullable=False),
        sa.Column("direction", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("call_sid", name=op.f("pk_telephony_twilio_calls")),
    )
    with op.batch_alter_table("telephony_twilio_calls", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_telephony_twilio_calls_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("telephony_twilio_calls", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_telephony_twilio_calls_organization_id"))

    op.drop_table("telephony_twilio_calls")
    with op.batch_alter_table("telephony_sync_leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_telephony_sync_leases_organization_id"))

    op.drop_table("telephony_sync_leases")
    with op.batch_alter_table("telephony_sip_trunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_telephony_sip_trunks_organization_id"))

    op.drop_table("telephony_sip_trunks")
    with op.batch_alter_table("telephony_phone_numbers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_telephony_phone_numbers_organization_id"))
        batch_op.drop_index(batch_op.f("ix_telephony_phone_numbers_flow_id"))

    op.drop_table("telephony_phone_numbers")
    with op.batch_alter_table("telephony_dispatch_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_telephony_dispatch_rules_organization_id"))
        batch_op.drop_index(batch_op.f("ix_telephony_dispatch_rules_flow_id"))

    op.drop_table("telephony_dispatch_rules")
