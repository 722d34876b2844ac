"""Knowledge documents: accept uploads, hand ingestion to a job, answer searches. Never commits."""

from __future__ import annotations

import structlog
from sqlalchemy import Select, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.kit.blobs import BlobStore, BlobStoreError
from parley.kit.db import after_commit
from parley.kit.errors import PayloadTooLarge, ServiceUnavailable, Unprocessable, UnsupportedMediaType
from parley.kit.ids import new_id
from parley.kit.jobs import JobQueue
from parley.kit.tenancy import get_owned, scoped
from parley.knowledge import parsing, repository
from parley.knowledge.models import DocumentStatus, KnowledgeChunk, KnowledgeDocument
from parley.knowledge.schemas import KnowledgeDocumentOut, SearchHit

log = structlog.get_logger("parley.knowledge")

MAX_DOCUMENT_BYTES = 20 * 1024 * 1024
INGEST_JOB = "knowledge.ingest_document"


def to_out(document: KnowledgeDocument, *, include_text: bool = False) -> KnowledgeDocumentOut:
    out = KnowledgeDocumentOut.model_validate(document, from_attributes=True)
    if not include_text:
        out.text = None
    return out


def _blob_key(document: KnowledgeDocument) -> str:
    return f"{document.organization_id}/knowledge/{document.id}"


def _clean_filename(filename: str | None) -> str | None:
    if not filename:
        return None
    name = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return name[:255] or None


def _title_from(filename: str | None) -> str:
    if not filename:
        return "Untitled document"
    stem = filename.rsplit(".", 1)[0] if "." in filename else filename
    return (stem.strip() or filename)[:300]


def _ingest_after_commit(session: AsyncSession, jobs: JobQueue, document_id: str) -> None:
    """Queue the ingestion once the transaction has committed (never for a rolled-back one)."""

    async def enqueue() -> None:
        await jobs.submit(INGEST_JOB, {"document_id": document_id})

    after_commit(session, enqueue)


async def create_from_file(
    session: AsyncSession,
    blobs: BlobStore,
    jobs: JobQueue,
    context: OrgContext,
    *,
    data: bytes,
    filename: str | None,
    title: str | None,
) -> KnowledgeDocument:
    if not data:
        raise Unprocessable("The uploaded file is empty.", loc=("body", "file"))
    if len(data) > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(
            f"The file has {len(data)} bytes; documents may have at most {MAX_DOCUMENT_BYTES} bytes."
        )
    filename = _clean_filename(filename)
    try:
        content_type = parsing.sniff(data, filename)
    except parsing.UnsupportedDocument as exc:
        raise UnsupportedMediaType(str(exc)) from exc
    document = KnowledgeDocument(
        id=new_id("doc"),
        organization_id=context.organization_id,
        title=title or _title_from(filename),
        status=DocumentStatus.pending,
        source="file",
        filename=filename,
        content_type=content_type,
        size_bytes=len(data),
        chunk_count=0,
        created_by=context.actor_user_id,
    )
    document.blob_key = _blob_key(document)
    session.add(document)
    await session.flush()
    try:
        await blobs.put(document.blob_key, data, content_type)
    except BlobStoreError as exc:
        log.error("knowledge_blob_put_failed", error_type=type(exc).__name__)
        raise ServiceUnavailable("The file could not be stored right now; please try again.") from exc
    _ingest_after_commit(session, jobs, document.id)
    return document


async def create_from_text(
    session: AsyncSession, jobs: JobQueue, context: OrgContext, *, title: str, text: str
) -> KnowledgeDocument:
    size = len(text.encode())
    if size > MAX_DOCUMENT_BYTES:
        raise PayloadTooLarge(f"The text has {size} bytes; documents may have at most {MAX_DOCUMENT_BYTES}.")
    document = KnowledgeDocument(
        id=new_id("doc"),
        organization_id=context.organization_id,
        title=title,
        status=DocumentStatus.pending,
        source="text",
        content_type=parsing.TEXT,
        size_bytes=size,
        chunk_count=0,
        text=text,
        created_by=context.actor_user_id,
    )
    session.add(document)
    await session.flush()
    _ingest_after_commit(session, jobs, document.id)
    return document


async def get_document(session: AsyncSession, organization_id: str, document_id: str) -> KnowledgeDocument:
    return await get_owned(session, KnowledgeDocument, document_id, organization_id, "Knowledge document")


async def delete_chunks(session: AsyncSession, document_id: str) -> None:
    await repository.unindex_document(session, document_id)
    await session.execute(delete(KnowledgeChunk).where(KnowledgeChunk.document_id == document_id))


async def delete_document(
    session: AsyncSession, blobs: BlobStore, organization_id: str, document_id: str
) -> KnowledgeDocument:
    document = await get_document(session, organization_id, document_id)
    await delete_chunks(session, document.id)
    await session.delete(document)
    await session.flush()
    blob_key = document.blob_key
    if blob_key:

        async def remove_blob() -> None:
            # After the commit: a failed request must not lose the original file.
            try:
                await blobs.delete(blob_key)
            except BlobStoreError as exc:
                log.warning("knowledge_blob_delete_failed", error_type=type(exc).__name__)

        after_commit(session, remove_blob)
    return document


async def search(
    session: AsyncSession,
    organization_id: str,
    query: str,
    top_k: int = 5,
    document_ids: list[str] | None = None,
) -> list[SearchHit]:
    """The ``top_k`` chunks of the organization's ready documents that best match ``query``."""
    hits = await repository.search_chunks(session, organization_id, query, top_k, document_ids)
    return [
        SearchHit(
            document_id=h.document_id,
            document_title=h.document_title,
            chunk_id=h.chunk_id,
            text=h.text,
            score=round(h.score, 6),
        )
        for h in hits
    ]


async def pending_document_ids(session: AsyncSession) -> list[str]:
    rows = await session.scalars(
        select(KnowledgeDocument.id)
        .where(KnowledgeDocument.status == DocumentStatus.pending)
        .order_by(KnowledgeDocument.id)
    )
    return list(rows)


def documents_query(organization_id: str, status: str | None = None) -> Select[KnowledgeDocument]:
    stmt = scoped(KnowledgeDocument, organization_id)
    if status is not None:
        stmt = stmt.where(KnowledgeDocument.status == status)
    return stmt
