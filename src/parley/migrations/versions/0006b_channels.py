"""channel routes, WhatsApp accounts and messages

Revision ID: 0006b
Revises: 0005b
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006b"
down_revision: str | Sequence[str] | None = "0005b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "channel_routes",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("channel_kind", sa.String(length=20), nullable=False),
        sa.Column("address", sa.String(length=80), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=False),
        sa.Column("fallback_flow_id", sa.String(length=40), nullable=True),
        sa.Column("office_hours", sa.JSON(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["flow_id"], ["flows.id"], name=op.f("fk_channel_routes_flow_id_flows"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["fallback_flow_id"],
            ["flows.id"],
            name=op.f("fk_channel_routes_fallback_flow_id_flows"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_channel_routes")),
        sa.UniqueConstraint(
            "organization_id",
            "channel_kind",
            "address",
            name=op.f("uq_channel_routes_organization_id_channel_kind_address"),
        ),
    )
    with op.batch_alter_table("channel_routes", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_channel_routes_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_channel_routes_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_channel_routes_fallback_flow_id"), ["fallback_flow_id"], unique=False
        )

    op.create_table(
        "whatsapp_accounts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("phone_number_id", sa.String(length=40), nullable=False),
        sa.Column("waba_id", sa.String(length=40), nullable=False),
        sa.Column("display_phone_number", sa.String(length=40), nullable=False),
        sa.Column("secrets", sa.JSON(), nullable=False),
        sa.Column("verify_token_sha256", sa.String(length=64), nullable=False),
        sa.Column("unsupported_reply", sa.String(length=1000), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_whatsapp_accounts")),
        sa.UniqueConstraint("phone_number_id", name=op.f("uq_whatsapp_accounts_phone_number_id")),
    )
    with op.batch_alter_table("whatsapp_accounts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_whatsapp_accounts_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_whatsapp_accounts_verify_token_sha256"), ["verify_token_sha256"], unique=False
        )

    op.create_table(
        "whatsapp_messages",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("account_id", sa.String(length=40), nullable=False),
        sa.Column("direction", sa.String(length=10), nullable=False),
        sa.Column("wamid", sa.String(length=200), nullable=True),
        sa.Column("wa_id", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=20), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("session_id", sa.String(length=40), nullable=True),
        sa.Column("reply_to_id", sa.String(length=40), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["whatsapp_accounts.id"],
            name=op.f("fk_whatsapp_messages_account_id_whatsapp_accounts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_whatsapp_messages")),
        sa.UniqueConstraint("account_id", "wamid", name=op.f("uq_whatsapp_messages_account_id_wamid")),
    )
    with op.batch_alter_table("whatsapp_messages", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_whatsapp_messages_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_whatsapp_messages_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_whatsapp_messages_reply_to_id"), ["reply_to_id"], unique=False)
        batch_op.create_index("ix_whatsapp_messages_account_id_wa_id", ["account_id", "wa_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("whatsapp_messages", schema=None) as batch_op:
        batch_op.drop_index("ix_whatsapp_messages_account_id_wa_id")
        batch_op.drop_index(batch_op.f("ix_whatsapp_messages_reply_to_id"))
        batch_op.drop_index(batch_op.f("ix_whatsapp_messages_status"))
        batch_op.drop_index(batch_op.f("ix_whatsapp_messages_organization_id"))
    op.drop_table("whatsapp_messages")
    with op.batch_alter_table("whatsapp_accounts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_whatsapp_accounts_verify_token_sha256"))
        batch_op.drop_index(batch_op.f("ix_whatsapp_accounts_organization_id"))
    op.drop_table("whatsapp_accounts")
    with op.batch_alter_table("channel_routes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_channel_routes_fallback_flow_id"))
        batch_op.drop_index(batch_op.f("ix_channel_routes_flow_id"))
        batch_op.drop_index(batch_op.f("ix_channel_routes_organization_id"))
    op.drop_table("channel_routes")
