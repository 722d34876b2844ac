"""calls list: indexes in the list's own order, per organization

``GET /api/calls`` (and the monitoring history) read an organization's calls newest first by id, a
page at a time (keyset: ``id < cursor``). With (organization_id, id) both engines walk the index from
the cursor and stop after a page, instead of sorting all of the organization's calls for each page.
(organization_id, caller, id) does the same for the console's caller filter, which matches few calls
(walking the whole list to find them would read every call of the organization).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.create_index("ix_calls_organization_id_id", ["organization_id", "id"], unique=False)
        batch_op.create_index(
            "ix_calls_organization_id_caller_id", ["organization_id", "caller", "id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("calls", schema=None) as batch_op:
        batch_op.drop_index("ix_calls_organization_id_caller_id")
        batch_op.drop_index("ix_calls_organization_id_id")
