"""knowledge search structures: the FTS5 table on SQLite, the tsvector GIN index on PostgreSQL

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of parley.knowledge.repository.PG_VECTOR: the index only serves queries whose
# expression is exactly this text.
PG_VECTOR = "to_tsvector('simple', translate(text, 'ÀÁÂÃÄÅàáâãäåÈÉÊËèéêëÌÍÎÏìíîïÒÓÔÕÖØòóôõöøÙÚÛÜùúûüÝýÿÇçÑñ', 'AAAAAAaaaaaaEEEEeeeeIIIIiiiiOOOOOOooooooUUUUuuuuYyyCcNn'))"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE INDEX IF NOT EXISTS ix_knowledge_chunks_tsv ON knowledge_chunks USING gin ({PG_VECTOR})"
        )
        return
    op.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS knowledge_chunks_fts USING fts5("
        "text, tokenize = 'unicode61 remove_diacritics 2')"
    )
    # Chunks indexed before this revision (by the earlier create-on-first-use code) are indexed again.
    op.execute("DELETE FROM knowledge_chunks_fts")
    op.execute("INSERT INTO knowledge_chunks_fts(rowid, text) SELECT rowid, text FROM knowledge_chunks")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_knowledge_chunks_tsv")
    else:
        op.execute("DROP TABLE IF EXISTS knowledge_chunks_fts")
