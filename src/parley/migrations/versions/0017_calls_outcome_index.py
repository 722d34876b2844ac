"""calls list: the outcome filter walks an index of its own

``GET /api/calls?outcome=...`` (the console's outcome filter) walked (organization_id, id) and read
every call's row to check its outcome: for an outcome of one call in seven, about 350 rows for a page
of 50. With (organization_id, outcome, id) both engines walk only the calls with that outcome, newest
first from the cursor, and stop after a page, as the unfiltered list does.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.create_index(
            "ix_calls_organization_id_outcome_id", ["organization_id", "outcome", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_index("ix_calls_organization_id_outcome_id")
