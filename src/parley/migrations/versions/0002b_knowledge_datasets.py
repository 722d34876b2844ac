"""knowledge documents and chunks (full-text indexed), datasets, tags and items

Revision ID: 0002b
Revises: 0001
Create Date: 2026-11-24 09:00:00.000000

The full-text structures (SQLite: an FTS5 table; PostgreSQL: a GIN index over
``to_tsvector('simple', text)``) come from revision 0004; this downgrade also drops them in case an
early database created them on first use.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002b"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("filename", sa.String(length=255), nullable=True),
        sa.Column("content_type", sa.String(length=100), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("blob_key", sa.String(length=300), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("indexed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_documents")),
    )
    with op.batch_alter_table("knowledge_documents", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_knowledge_documents_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "knowledge_chunks",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("document_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"],
            ["knowledge_documents.id"],
            name=op.f("fk_knowledge_chunks_document_id_knowledge_documents"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_knowledge_chunks")),
    )
    with op.batch_alter_table("knowledge_chunks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_knowledge_chunks_document_position", ["document_id", "position"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_knowledge_chunks_organization_id"), ["organization_id"], unique=False
        )

    op.create_table(
        "datasets",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=40), nullable=True),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("organization_id", "name", name=op.f("uq_datasets_organization_id_name")),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_datasets_organization_id"), ["organization_id"], unique=False)

    op.create_table(
        "dataset_tags",
        sa.Column("dataset_id", sa.String(length=40), nullable=False),
        sa.Column("tag", sa.String(length=60), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_tags_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", "tag", name=op.f("pk_dataset_tags")),
    )
    with op.batch_alter_table("dataset_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_dataset_tags_tag"), ["tag"], unique=False)

    op.create_table(
        "dataset_items",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("dataset_id", sa.String(length=40), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("organization_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_items_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dataset_items")),
    )
    with op.batch_alter_table("dataset_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_dataset_items_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_dataset_items_organization_id"), ["organization_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("dataset_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_items_organization_id"))
        batch_op.drop_index(batch_op.f("ix_dataset_items_dataset_id"))
    op.drop_table("dataset_items")
    with op.batch_alter_table("dataset_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_dataset_tags_tag"))
    op.drop_table("dataset_tags")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_datasets_organization_id"))
    op.drop_table("datasets")

    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_knowledge_chunks_tsv")
    else:
        op.execute("DROP TABLE IF EXISTS knowledge_chunks_fts")
    with op.batch_alter_table("knowledge_chunks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_knowledge_chunks_organization_id"))
        batch_op.drop_index("ix_knowledge_chunks_document_position")
    op.drop_table("knowledge_chunks")
    with op.batch_alter_table("knowledge_documents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_knowledge_documents_organization_id"))
    op.drop_table("knowledge_documents")
