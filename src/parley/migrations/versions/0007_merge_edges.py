"""join the branches of the platform's edges: sessions, telephony, channels, integrations, notifications

Revision ID: 0007
Revises: 0005a, 0006a, 0006b, 0006c, 0006d
Create Date: 2026-11-23
"""

from collections.abc import Sequence

revision: str = "0007"
down_revision: str | Sequence[str] | None = ("0005a", "0006a", "0006b", "0006c", "0006d")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Nothing to change: one head again, so later migrations have a single parent."""


def downgrade() -> None:
    """Nothing to undo."""
