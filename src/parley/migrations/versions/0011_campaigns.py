"""outbound campaigns: campaigns, their contacts, the do-not-call list

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=False),
        sa.Column("caller_id", sa.String(length=20), nullable=False),
        sa.Column("windows", sa.JSON(), nullable=False),
        sa.Column("holidays", sa.JSON(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("retry_backoff_minutes", sa.Integer(), nullable=False),
        sa.Column("retry_on", sa.JSON(), nullable=False),
        sa.Column("voicemail", sa.String(length=20), nullable=False),
        sa.Column("voicemail_message", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("started_at", _utc(), nullable=True),
        sa.Column("finished_at", _utc(), nullable=True),
        sa.Column("tick_holder", sa.String(length=40), nullable=True),
        sa.Column("tick_until", _utc(), nullable=True),
        sa.Column("next_round", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaigns")),
    )
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_campaigns_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_campaigns_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_campaigns_organization_id"), ["organization_id"], unique=False)

    op.create_table(
        "campaign_contacts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("campaign_id", sa.String(length=40), nullable=False),
        sa.Column("row_number", sa.Integer(), nullable=False),
        sa.Column("phone", sa.String(length=20), nullable=False),
        sa.Column("variables", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_result", sa.String(length=40), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("answered_by", sa.String(length=40), nullable=True),
        sa.Column("provider", sa.String(length=20), nullable=True),
        sa.Column("call_id", sa.String(length=40), nullable=True),
        sa.Column("provider_call_id", sa.String(length=80), nullable=True),
        sa.Column("next_attempt_at", _utc(), nullable=True),
        sa.Column("lease_until", _utc(), nullable=True),
        sa.Column("last_attempt_at", _utc(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("updated_at", _utc(), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaign_contacts")),
        sa.UniqueConstraint("campaign_id", "phone", name=op.f("uq_campaign_contacts_campaign_id_phone")),
    )
    with op.batch_alter_table("campaign_contacts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_campaign_contacts_due", ["campaign_id", "status", "next_attempt_at"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_campaign_contacts_call_id"), ["call_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_campaign_contacts_provider_call_id"), ["provider_call_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_campaign_contacts_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "campaign_do_not_call",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("phone", sa.String(length=20), nullable=False),
        sa.Column("note", sa.String(length=200), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaign_do_not_call")),
        sa.UniqueConstraint(
            "organization_id", "phone", name=op.f("uq_campaign_do_not_call_organization_id_phone")
        ),
    )
    with op.batch_alter_table("campaign_do_not_call", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_campaign_do_not_call_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    op.drop_table("campaign_do_not_call")
    op.drop_table("campaign_contacts")
    op.drop_table("campaigns")
