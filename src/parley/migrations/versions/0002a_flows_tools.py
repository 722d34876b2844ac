"""flows and tools: flows, flow versions, tools

Revision ID: 0002a
Revises: 0001
Create Date: 2026-11-24 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002a"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "flows",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("definition_hash", sa.String(length=64), nullable=False),
        sa.Column("published_hash", sa.String(length=64), nullable=True),
        sa.Column("latest_version", sa.Integer(), nullable=True),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flows")),
    )
    with op.batch_alter_table("flows", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_flows_organization_id"), ["organization_id"], unique=False)

    op.create_table(
        "flow_versions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("flow_id", sa.String(length=40), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("definition_hash", sa.String(length=64), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("published_by", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["flow_id"], ["flows.id"], name=op.f("fk_flow_versions_flow_id_flows"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flow_versions")),
        sa.UniqueConstraint("flow_id", "version", name=op.f("uq_flow_versions_flow_id_version")),
    )
    with op.batch_alter_table("flow_versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_flow_versions_flow_id"), ["flow_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_flow_versions_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "tools",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("secrets", sa.JSON(), nullable=False),
        sa.Column("secret_hints", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tools")),
        sa.UniqueConstraint("organization_id", "name", name=op.f("uq_tools_organization_id_name")),
    )
    with op.batch_alter_table("tools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tools_organization_id"), ["organization_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("tools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tools_organization_id"))

    op.drop_table("tools")
    with op.batch_alter_table("flow_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_flow_versions_organization_id"))
        batch_op.drop_index(batch_op.f("ix_flow_versions_flow_id"))

    op.drop_table("flow_versions")
    with op.batch_alter_table("flows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_flows_organization_id"))

    op.drop_table("flows")
