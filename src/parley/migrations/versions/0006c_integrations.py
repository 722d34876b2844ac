"""OAuth2 integrations: clients, pending states, connections

Revision ID: 0006c
Revises: 0005b
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006c"
down_revision: str | Sequence[str] | None = "0005b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "integration_clients",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=True),
        sa.Column("client_id", sa.String(length=500), nullable=False),
        sa.Column("client_secret", sa.String(length=2000), nullable=True),
        sa.Column("authorize_url", sa.String(length=1000), nullable=True),
        sa.Column("token_url", sa.String(length=1000), nullable=True),
        sa.Column("revocation_url", sa.String(length=1000), nullable=True),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("token_auth_method", sa.String(length=30), nullable=False),
        sa.Column("tenant", sa.String(length=100), nullable=True),
        sa.Column("updated_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["updated_by"],
            ["users.id"],
            name=op.f("fk_integration_clients_updated_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_integration_clients")),
        sa.UniqueConstraint(
            "organization_id", "provider", name=op.f("uq_integration_clients_organization_id_provider")
        ),
    )
    with op.batch_alter_table("integration_clients", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_integration_clients_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "oauth_states",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("state_hash", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("code_verifier", sa.String(length=500), nullable=False),
        sa.Column("redirect_uri", sa.String(length=1000), nullable=False),
        sa.Column("return_to", sa.String(length=2000), nullable=True),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_oauth_states_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_states")),
        sa.UniqueConstraint("state_hash", name=op.f("uq_oauth_states_state_hash")),
    )
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_oauth_states_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "integration_connections",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("connected_by", sa.String(length=40), nullable=True),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("token_type", sa.String(length=40), nullable=False),
        sa.Column("access_token", sa.String(length=8000), nullable=False),
        sa.Column("refresh_token", sa.String(length=8000), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("last_refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(length=1000), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["connected_by"],
            ["users.id"],
            name=op.f("fk_integration_connections_connected_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_integration_connections")),
        sa.UniqueConstraint(
            "organization_id", "provider", name=op.f("uq_integration_connections_organization_id_provider")
        ),
    )
    with op.batch_alter_table("integration_connections", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_integration_connections_organization_id"), ["organization_id"], unique=False
        )
        batch_op.create_index("ix_integration_connections_expires_at", ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("integration_connections", schema=None) as batch_op:
        batch_op.drop_index("ix_integration_connections_expires_at")
        batch_op.drop_index(batch_op.f("ix_integration_connections_organization_id"))
    op.drop_table("integration_connections")
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oauth_states_organization_id"))
    op.drop_table("oauth_states")
    with op.batch_alter_table("integration_clients", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_integration_clients_organization_id"))
    op.drop_table("integration_clients")
