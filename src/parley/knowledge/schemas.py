from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from parley.kit.schemas import StrictModel

DocumentStatusName = Literal["pending", "ready", "failed"]


class KnowledgeTextCreate(StrictModel):
    """A document given as text (JSON, form fields or text/plain JSON). Files go as multipart ``file``."""

    title: str = Field(min_length=1, max_length=300, examples=["Öffnungszeiten"])
    text: str = Field(min_length=1, description="The document's text (plain text or Markdown).")


class KnowledgeDocumentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    title: str
    status: DocumentStatusName = Field(
        description="pending while the document is parsed, chunked and indexed; then ready or failed."
    )
    error: str | None = Field(description="Why ingestion failed (status failed only).")
    source: Literal["file", "text"]
    filename: str | None
    content_type: str = Field(description="The type recognised from the content, not the file name.")
    size_bytes: int
    chunk_count: int
    indexed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    created_by: str | None
    text: str | None = Field(default=None, description="The extracted text; only with include_text=true.")


class KnowledgeSearchIn(StrictModel):
    query: str = Field(min_length=1, max_length=1000, examples=["Wann habt ihr samstags geöffnet?"])
    top_k: int = Field(default=5, ge=1, le=20)
    document_ids: list[str] | None = Field(
        default=None, max_length=100, description="Search only these documents (default: all of them)."
    )


class SearchHit(BaseModel):
    document_id: str
    document_title: str
    chunk_id: str
    text: str
    score: float = Field(description="Relevance, higher is better; comparable within one result list only.")


class KnowledgeSearchOut(BaseModel):
    query: str
    results: list[SearchHit]
