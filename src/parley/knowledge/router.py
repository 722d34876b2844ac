from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import UploadFile

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.kit.body import ParsedBody, read_body_data, validate_body
from parley.kit.db import DbSession
from parley.kit.errors import PayloadTooLarge, documented
from parley.kit.jobs import runner_for
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut, StrictModel
from parley.knowledge import service
from parley.knowledge.models import KnowledgeDocument
from parley.knowledge.schemas import (
    DocumentStatusName,
    KnowledgeDocumentOut,
    KnowledgeSearchIn,
    KnowledgeSearchOut,
    KnowledgeTextCreate,
)

router = ParleyRouter(prefix="/api/knowledge", tags=["Knowledge"])

DocId = Annotated[str, Path(alias="docId", max_length=40, description="Knowledge document id (doc_...).")]

_REF = "#/components/schemas/{}"
_TEXT_SCHEMA = KnowledgeTextCreate.model_json_schema()
UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "PDF, DOCX, HTML, Markdown or plain text (at most 20 MB).",
                        },
                        "title": {"type": "string", "minLength": 1, "maxLength": 300},
                        "text": {"type": "string", "minLength": 1},
                    },
                    "description": "Either a file (with an optional title) or the fields title and text.",
                }
            },
            "application/json": {"schema": _TEXT_SCHEMA},
            "text/plain": {"schema": {"type": "string", "description": "JSON text of {title, text}"}},
        },
    }
}
UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    **documented(413, 415, 503),
    422: {
        "description": "Invalid fields, or an empty or unreadable upload.",
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": _REF.format("ErrorBody")},
                        {"$ref": _REF.format("HTTPValidationError")},
                    ]
                }
            }
        },
    },
}


class _FileFields(StrictModel):
    title: str | None = None


@dataclass
class UploadInput:
    text: KnowledgeTextCreate | None = None
    data: bytes = b""
    filename: str | None = None
    title: str | None = None


async def read_upload(request: Request) -> UploadInput:
    """A multipart ``file`` (with an optional ``title``), or ``{title, text}`` in any body media type."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type == "multipart/form-data":
        form = await request.form()
        files = [v for v in form.getlist("file") if isinstance(v, UploadFile)]
        if files:
            if len(files) > 1:
                raise RequestValidationError(
                    [
                        {
                            "type": "too_long",
                            "loc": ("body", "file"),
                            "msg": "Upload one file per request.",
                            "input": None,
                        }
                    ]
                )
            fields = {k: v for k, v in form.multi_items() if k != "file"}
            extra = [k for k in fields if k != "title"]
            if extra:
                raise RequestValidationError(
                    [
                        {
                            "type": "extra_forbidden",
                            "loc": ("body", k),
                            "msg": "Extra inputs are not permitted",
                            "input": None,
                        }
                        for k in extra
                    ]
                )
            title = validate_body(_FileFields, {k: str(v) for k, v in fields.items()}).title or None
            upload = files[0]
            data = await upload.read(service.MAX_DOCUMENT_BYTES + 1)
            if len(data) > service.MAX_DOCUMENT_BYTES:
                raise PayloadTooLarge(f"Documents may have at most {service.MAX_DOCUMENT_BYTES} bytes.")
            return UploadInput(data=data, filename=upload.filename, title=title)
    text = validate_body(KnowledgeTextCreate, await read_body_data(request, KnowledgeTextCreate))
    return UploadInput(text=text)


@router.post(
    "/documents",
    summary="Create Knowledge Document",
    response_model=KnowledgeDocumentOut,
    responses=UPLOAD_RESPONSES,
    openapi_extra=UPLOAD_BODY,
)
async def create_knowledge_document(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    upload: Annotated[UploadInput, Depends(read_upload)],
) -> KnowledgeDocumentOut:
    """Upload a file (multipart ``file``) or send ``{title, text}``. The answer is ``pending``; parsing,
    chunking and indexing run in the background until the status is ``ready`` (or ``failed``, with
    the reason in ``error``). The type is recognised from the content, never from the file name."""
    state = request.app.state
    if upload.text is not None:
        document = await service.create_from_text(
            session, runner_for(state), context, title=upload.text.title, text=upload.text.text
        )
    else:
        document = await service.create_from_file(
            session,
            state.blobs,
            runner_for(state),
            context,
            data=upload.data,
            filename=upload.filename,
            title=upload.title,
        )
    describe(request, "knowledge_document", document.id, content_type=document.content_type)
    return service.to_out(document)


@router.get("/documents", summary="List Knowledge Documents", response_model=Page[KnowledgeDocumentOut])
async def list_knowledge_documents(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    status: Annotated[DocumentStatusName | None, Query(description="Only documents in this state.")] = None,
) -> Page[KnowledgeDocumentOut]:
    stmt = service.documents_query(context.organization_id, status)
    rows, cursor = await paginate(session, stmt, KnowledgeDocument.id, page)
    return Page[KnowledgeDocumentOut](items=[service.to_out(d) for d in rows], next_cursor=cursor)


@router.get("/documents/{docId}", summary="Get Knowledge Document", response_model=KnowledgeDocumentOut)
async def get_knowledge_document(
    session: DbSession,
    context: OrgReader,
    doc_id: DocId,
    include_text: Annotated[bool, Query(description="Include the extracted text.")] = False,
) -> KnowledgeDocumentOut:
    """A document's metadata, ingestion status and chunk count; with ``include_text=true`` its text."""
    document = await service.get_document(session, context.organization_id, doc_id)
    return service.to_out(document, include_text=include_text)


@router.delete("/documents/{docId}", summary="Delete Knowledge Document", response_model=DeletedOut)
async def delete_knowledge_document(
    request: Request, session: DbSession, context: OrgWriter, doc_id: DocId
) -> DeletedOut:
    """Delete the document, its chunks (they leave the search index at once) and its original file."""
    document = await service.delete_document(
        session, request.app.state.blobs, context.organization_id, doc_id
    )
    describe(request, "knowledge_document", document.id)
    return DeletedOut(id=document.id)


@router.post("/search", summary="Search Knowledge", response_model=KnowledgeSearchOut)
async def search_knowledge(
    session: DbSession,
    context: OrgReader,
    data: Annotated[KnowledgeSearchIn, ParsedBody(KnowledgeSearchIn)],
) -> KnowledgeSearchOut:
    """Full-text search over the organization's ready documents: any of the question's words may
    match (German and English, umlauts folded), best chunks first."""
    hits = await service.search(session, context.organization_id, data.query, data.top_k, data.document_ids)
    return KnowledgeSearchOut(query=data.query, results=hits)
