"""Knowledge documents and their chunks.

The document row is the durable state of its ingestion job: ``status`` is ``pending`` until the job has
parsed, chunked and indexed it (``ready``), or gave up with a reason in ``error`` (``failed``). The
original bytes live in the blob store under ``blob_key``; the extracted text lives here.

Full-text search: on PostgreSQL an expression GIN index over ``to_tsvector('simple', text)`` (created
by the migration); on SQLite an FTS5 table kept in sync by the service (see ``knowledge.repository``).
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from parley.kit.db import Base, OrgScopedMixin, TimestampMixin, UTCDateTime


class DocumentStatus(enum.StrEnum):
    pending = "pending"
    ready = "ready"
    failed = "failed"


class KnowledgeDocument(OrgScopedMixin, TimestampMixin, Base):
    __tablename__ = "knowledge_documents"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    title: Mapped[str] = mapped_column(String(300), nullable=False)
    status: Mapped[str] = mapped_column(String(16), default=DocumentStatus.pending, nullable=False)
    source: Mapped[str] = mapped_column(String(16), nullable=False)  # "file" or "text"
    filename: Mapped[str | None] = mapped_column(String(255))
    content_type: Mapped[str] = mapped_column(String(100), nullable=False)
    size_bytes: Mapped[int] = mapped_column(Integer, nullable=False)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    error: Mapped[str | None] = mapped_column(String(500))
    blob_key: Mapped[str | None] = mapped_column(String(300))
    text: Mapped[str | None] = mapped_column(Text)
    indexed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(40))


class KnowledgeChunk(OrgScopedMixin, Base):
    __tablename__ = "knowledge_chunks"
    __table_args__ = (Index("ix_knowledge_chunks_document_position", "document_id", "position"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    document_id: Mapped[str] = mapped_column(
        ForeignKey("knowledge_documents.id", ondelete="CASCADE"), nullable=False
    )
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
