"""The ingestion job: read the original, extract its text, chunk it, index it; record the outcome.

Idempotent: a document that is no longer ``pending`` is left alone, so a job recovered after a restart
(or delivered twice by a distributed queue) does no harm.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.blobs import BlobNotFound, BlobStoreError
from parley.kit.db import utcnow
from parley.kit.ids import new_id
from parley.kit.jobs import JobContext, registry
from parley.knowledge import parsing, repository, service
from parley.knowledge.models import DocumentStatus, KnowledgeChunk, KnowledgeDocument

log = structlog.get_logger("parley.knowledge")


async def _recover(session: AsyncSession) -> list[dict[str, Any]]:
    return [{"document_id": doc_id} for doc_id in await service.pending_document_ids(session)]


async def _mark_failed(context: JobContext, document_id: str, reason: str) -> None:
    async with context.unit() as session:
        document = await session.get(KnowledgeDocument, document_id)
        if document is None or document.status != DocumentStatus.pending:
            return
        document.status = DocumentStatus.failed
        document.error = reason[:500]


async def _read_text(context: JobContext, document: KnowledgeDocument) -> str:
    if document.source == "text":
        return parsing.check_text_length(parsing.normalize(parsing.check_text_length(document.text or "")))
    if not document.blob_key:
        raise parsing.ExtractionError("The original file is missing.")
    try:
        data = await context.blobs.get(document.blob_key)
    except BlobNotFound as exc:
        raise parsing.ExtractionError("The original file is missing from the blob store.") from exc
    return await asyncio.to_thread(parsing.extract_text, data, document.content_type)


@registry.handler(service.INGEST_JOB, recover=_recover)
async def ingest_document(context: JobContext, payload: dict[str, Any]) -> None:
    document_id = str(payload["document_id"])
    try:
        async with context.unit() as session:
            document = await session.get(KnowledgeDocument, document_id)
            if document is None or document.status != DocumentStatus.pending:
                return
            text = await _read_text(context, document)
            pieces = parsing.chunk_text(text)
            if not pieces:
                raise parsing.ExtractionError("The document contains no text.")
            if len(pieces) > parsing.MAX_CHUNKS:
                raise parsing.DocumentTooLarge(
                    f"The document makes {len(pieces):,} chunks; at most {parsing.MAX_CHUNKS:,} are indexed. "
                    "Split it into smaller documents."
                )
            await service.delete_chunks(session, document.id)  # a retried job starts clean
            session.add_all(
                KnowledgeChunk(
                    id=new_id("chk"),
                    organization_id=document.organization_id,
                    document_id=document.id,
                    position=position,
                    text=piece,
                )
                for position, piece in enumerate(pieces)
            )
            await session.flush()
            await repository.index_document(session, document.id)
            document.text = text
            document.chunk_count = len(pieces)
            document.status = DocumentStatus.ready
            document.error = None
            document.indexed_at = utcnow()
    except parsing.ExtractionError as exc:
        await _mark_failed(context, document_id, str(exc))
    except BlobStoreError as exc:
        log.error("knowledge_ingest_blob_error", document_id=document_id, error_type=type(exc).__name__)
        await _mark_failed(context, document_id, "The original file could not be read from storage.")
    except Exception as exc:
        log.error("knowledge_ingest_failed", document_id=document_id, error_type=type(exc).__name__)
        await _mark_failed(context, document_id, "Indexing failed unexpectedly; upload the document again.")
