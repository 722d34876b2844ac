from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request
from pydantic import AfterValidator

from parley.audit.dependencies import describe, request_facts
from parley.auth.dependencies import OrgAdmin, OrgReader, OrgWriter
from parley.kit.blobs import BlobStore
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import check_e164
from parley.privacy import service
from parley.privacy.schemas import (
    CallDeletedOut,
    CallerDeletedOut,
    CallerExportOut,
    CallExportOut,
    PrivacySettingsOut,
    PrivacySettingsUpdate,
    RedactionPreviewIn,
    RedactionPreviewOut,
    RetentionRunOut,
)

router = ParleyRouter(prefix="/api/privacy", tags=["Privacy"])

CallId = Annotated[str, Path(alias="callId", max_length=40, description="Call id (call_...).")]
PhoneNumber = Annotated[
    str,
    Path(
        alias="phoneNumber",
        max_length=25,
        description="The caller's number in E.164 form (`+4930123456`; `%2B` or `+` in the path).",
    ),
    AfterValidator(check_e164),
]


@router.get("/settings", summary="Get Privacy Settings", response_model=PrivacySettingsOut)
async def get_privacy_settings(session: DbSession, context: OrgReader) -> PrivacySettingsOut:
    """Redaction, retention and the recording notice of the organization (defaults when never set)."""
    return service.to_out(await service.get_settings(session, context.organization_id))


@router.patch("/settings", summary="Update Privacy Settings", response_model=PrivacySettingsOut)
async def update_privacy_settings(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[PrivacySettingsUpdate, ParsedBody(PrivacySettingsUpdate)],
) -> PrivacySettingsOut:
    """Change redaction, retention or the recording notice (admins). A custom pattern that is not a
    valid regular expression, or that backtracks catastrophically, is 422 naming it; so is a
    retention of 0 days."""
    row = await service.update_settings(session, context.organization_id, data)
    describe(request, "privacy_settings", context.organization_id, fields=sorted(data.model_fields_set))
    return service.to_out(row)


@router.post("/redaction/preview", summary="Preview Redaction", response_model=RedactionPreviewOut)
async def preview_redaction(
    session: DbSession,
    context: OrgWriter,
    data: Annotated[RedactionPreviewIn, ParsedBody(RedactionPreviewIn)],
) -> RedactionPreviewOut:
    """``text`` as it would be stored with the organization's redaction settings turned on. Nothing is kept."""
    row = await service.get_settings(session, context.organization_id)
    return RedactionPreviewOut(
        text=service.preview(row, data.text), redaction_enabled=bool(row and row.redaction_enabled)
    )


@router.get("/calls/{callId}/export", summary="Export Call", response_model=CallExportOut)
async def export_call(session: DbSession, context: OrgAdmin, call_id: CallId) -> CallExportOut:
    """Everything stored about one call as JSON: the record, transcript, tool calls, signals (admins)."""
    return await service.export_call(session, context.organization_id, call_id)


@router.delete("/calls/{callId}", summary="Delete Call", response_model=CallDeletedOut)
async def delete_call(
    request: Request, session: DbSession, context: OrgAdmin, call_id: CallId
) -> CallDeletedOut:
    """Delete one call with its brain signals, its conversation session and its recording (admins).
    The deletion is audited; the recording file is removed once the deletion has committed."""
    blobs: BlobStore = request.app.state.blobs
    result = await service.delete_call(session, blobs, context.organization_id, call_id)
    describe(request, "call", call_id, recording_deleted=result.recording_deleted, sessions=result.sessions)
    return result


@router.get(
    "/callers/{phoneNumber}/export",
    summary="Export Caller",
    response_model=CallerExportOut,
)
async def export_caller(session: DbSession, context: OrgAdmin, phone: PhoneNumber) -> CallerExportOut:
    """Everything stored about one phone number (calls as caller or callee, their signals, the
    conversation sessions and any other registered holder's rows) as JSON (admins)."""
    return await service.export_caller(session, context.organization_id, phone)


@router.delete(
    "/callers/{phoneNumber}",
    summary="Delete Caller",
    response_model=CallerDeletedOut,
)
async def delete_caller(
    request: Request, session: DbSession, context: OrgAdmin, phone: PhoneNumber
) -> CallerDeletedOut:
    """Delete everything stored about one phone number (admins). Audited with the number masked."""
    blobs: BlobStore = request.app.state.blobs
    result = await service.delete_caller(session, blobs, context.organization_id, phone)
    describe(
        request,
        "caller",
        service.mask_phone(phone),
        calls=result.calls,
        recordings=result.recordings,
        sources=result.sources,
    )
    return result


@router.post("/retention/run", summary="Run Retention", response_model=RetentionRunOut)
async def run_retention(request: Request, session: DbSession, context: OrgAdmin) -> RetentionRunOut:
    """Apply the organization's retention now (admins; the scheduled job does the same every
    ``PARLEY_PRIVACY_RETENTION_INTERVAL_SECONDS``). Without a retention nothing is deleted."""
    row = await service.get_settings(session, context.organization_id)
    days = row.retention_days if row is not None else None
    total = RetentionRunOut(retention_days=days, calls=0, recordings=0)
    if days is None:
        return total
    blobs: BlobStore = request.app.state.blobs
    while True:
        batch = await service.expire_batch(
            session,
            blobs,
            context.organization_id,
            days,
            actor_type=context.principal.kind,
            actor_id=context.principal.id,
            facts=request_facts(request),
        )
        total.calls += batch.calls
        total.recordings += batch.recordings
        for name, count in batch.sources.items():
            total.sources[name] = total.sources.get(name, 0) + count
        if batch.calls < service.RETENTION_BATCH:
            break
    describe(request, "privacy_retention", context.organization_id, calls=total.calls)
    return total
