"""bind an OAuth state to the browser that started it: the hash of the connect's cookie

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.add_column(sa.Column("browser_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("oauth_states", schema=None) as batch_op:
        batch_op.drop_column("browser_hash")
