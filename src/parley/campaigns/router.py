"""Campaign routes: campaigns, their contacts (upload, list, export), the do-not-call list, start /
pause / resume / cancel, and Twilio's signed status and answering-machine callbacks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter, guard_signed_webhook
from parley.auth.principal import OrgContext
from parley.campaigns import service
from parley.campaigns.models import Campaign, CampaignContact, DoNotCall
from parley.campaigns.schemas import (
    CampaignCreate,
    CampaignOut,
    CampaignStatus,
    CampaignUpdate,
    ContactOut,
    ContactStatus,
    DoNotCallBulkIn,
    DoNotCallBulkOut,
    DoNotCallIn,
    DoNotCallOut,
    UploadOut,
)
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import UnsupportedMediaType, documented
from parley.kit.jobs import runner_for
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut, check_e164

router = ParleyRouter(prefix="/api/campaigns", tags=["Campaigns"])

CampaignId = Annotated[str, Path(alias="campaignId", max_length=40, description="Campaign id (cmp_...).")]
EntryId = Annotated[str, Path(alias="entryId", max_length=40, description="Do-not-call entry id (dnc_...).")]
_FORM = "application/x-www-form-urlencoded"


def _phone(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_e164(value)
    except ValueError:
        return "+0"  # matches nothing: an empty page, not an error


# --- do-not-call list ------------------------------------------------------------------------------


@router.post(
    "/do-not-call",
    summary="Add Do Not Call Number",
    responses=documented(409),
    response_model=DoNotCallOut,
)
async def add_do_not_call(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[DoNotCallIn, ParsedBody(DoNotCallIn)],
) -> DoNotCallOut:
    """Never call this number from a campaign (checked before every dial). 409 when already listed."""
    row = await service.add_do_not_call(session, context.organization_id, data)
    describe(request, "do_not_call", row.id)
    return service.dnc_out(row)


@router.post(
    "/do-not-call/bulk",
    summary="Add Do Not Call Numbers",
    responses=documented(409),
    response_model=DoNotCallBulkOut,
)
async def add_do_not_call_bulk(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[DoNotCallBulkIn, ParsedBody(DoNotCallBulkIn)],
) -> DoNotCallBulkOut:
    """Add up to 10,000 numbers at once; numbers already listed are counted, not refused. A malformed
    number refuses the whole request (422 naming each one), so nothing is half-added."""
    result = await service.add_do_not_call_bulk(session, context.organization_id, data)
    describe(request, "do_not_call", None, added=result.added)
    return result


@router.get("/do-not-call", summary="List Do Not Call Numbers", response_model=Page[DoNotCallOut])
async def list_do_not_call(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    phone: Annotated[str | None, Query(max_length=25, description="Only this number.")] = None,
) -> Page[DoNotCallOut]:
    rows, cursor = await paginate(
        session, service.do_not_call_query(context.organization_id, _phone(phone)), DoNotCall.id, page
    )
    return Page[DoNotCallOut](items=[service.dnc_out(r) for r in rows], next_cursor=cursor)


@router.delete("/do-not-call/{entryId}", summary="Remove Do Not Call Number", response_model=DeletedOut)
async def remove_do_not_call(
    request: Request, session: DbSession, context: OrgWriter, entry_id: EntryId
) -> DeletedOut:
    row = await service.remove_do_not_call(session, context.organization_id, entry_id)
    describe(request, "do_not_call", row.id)
    return DeletedOut(id=row.id)


# --- Twilio callbacks ------------------------------------------------------------------------------


async def _twilio_callback(request: Request, session: DbSession, path: str, contact_id: str) -> Response:
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != _FORM:
        raise UnsupportedMediaType("Twilio callbacks are application/x-www-form-urlencoded.")
    form = await request.form()
    params = [(key, value) for key, value in form.multi_items() if isinstance(value, str)]
    await service.twilio_callback(
        session,
        request.app.state.settings,
        runner_for(request.app.state),
        path,
        contact_id,
        params,
        request.headers.get("x-twilio-signature"),
        request.url.query,
    )
    return Response(status_code=204)


ContactQuery = Annotated[str, Query(alias="contact", max_length=40)]


@router.post("/twilio/status", include_in_schema=False, dependencies=[Depends(guard_signed_webhook)])
async def twilio_status(request: Request, session: DbSession, contact_id: ContactQuery) -> Response:
    """Twilio's status callback for a campaign call (``CallStatus``), signed like the voice webhook."""
    return await _twilio_callback(request, session, service.STATUS_CALLBACK_PATH, contact_id)


@router.post("/twilio/amd", include_in_schema=False, dependencies=[Depends(guard_signed_webhook)])
async def twilio_amd(request: Request, session: DbSession, contact_id: ContactQuery) -> Response:
    """Twilio's asynchronous answering-machine detection result (``AnsweredBy``) for a campaign call."""
    return await _twilio_callback(request, session, service.AMD_CALLBACK_PATH, contact_id)


# --- campaigns -------------------------------------------------------------------------------------


@router.post("", summary="Create Campaign", responses=documented(404, 409), response_model=CampaignOut)
async def create_campaign(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[CampaignCreate, ParsedBody(CampaignCreate)],
) -> CampaignOut:
    """A draft campaign: its flow (published), caller id (one of the organization's numbers), calling
    windows in the organization's time zone, concurrency, retries and voicemail handling. A window that
    never opens is 422; an unknown flow or number 404; a flow without a published version 409."""
    row = await service.create_campaign(session, context.organization_id, data)
    describe(request, "campaign", row.id)
    return await service.to_out(session, row)


@router.get("", summary="List Campaigns", response_model=Page[CampaignOut])
async def list_campaigns(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    status: Annotated[CampaignStatus | None, Query(description="Only campaigns in this status.")] = None,
) -> Page[CampaignOut]:
    rows, cursor = await paginate(
        session, service.campaigns_query(context.organization_id, status), Campaign.id, page
    )
    return Page[CampaignOut](items=[await service.to_out(session, r) for r in rows], next_cursor=cursor)


@router.get("/{campaignId}", summary="Get Campaign", response_model=CampaignOut)
async def get_campaign(session: DbSession, context: OrgReader, campaign_id: CampaignId) -> CampaignOut:
    """The campaign with its contacts counted by status (its progress)."""
    row = await service.get_campaign(session, context.organization_id, campaign_id)
    return await service.to_out(session, row)


@router.patch(
    "/{campaignId}", summary="Update Campaign", responses=documented(409), response_model=CampaignOut
)
async def update_campaign(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    campaign_id: CampaignId,
    data: Annotated[CampaignUpdate, ParsedBody(CampaignUpdate)],
) -> CampaignOut:
    """Change windows, holidays, concurrency, retries or voicemail handling; 409 once it is completed
    or cancelled. A running campaign uses the change from its next dialing round."""
    row = await service.update_campaign(session, context.organization_id, campaign_id, data)
    describe(request, "campaign", row.id)
    return await service.to_out(session, row)


async def _transition(
    request: Request, session: DbSession, context: OrgContext, campaign_id: str, action: str
) -> CampaignOut:
    jobs = runner_for(request.app.state)
    organization_id = context.organization_id
    if action == "start":
        row = await service.start_campaign(session, jobs, organization_id, campaign_id)
    elif action == "resume":
        row = await service.resume_campaign(session, jobs, organization_id, campaign_id)
    elif action == "pause":
        row = await service.pause_campaign(session, organization_id, campaign_id)
    else:
        row = await service.cancel_campaign(session, organization_id, campaign_id)
    describe(request, "campaign", row.id, action=action)
    return await service.to_out(session, row)


@router.post(
    "/{campaignId}/start", summary="Start Campaign", responses=documented(409), response_model=CampaignOut
)
async def start_campaign(
    request: Request, session: DbSession, context: OrgWriter, campaign_id: CampaignId
) -> CampaignOut:
    """Start dialing (a draft with contacts only): calls start within the calling windows."""
    return await _transition(request, session, context, campaign_id, "start")


@router.post(
    "/{campaignId}/pause", summary="Pause Campaign", responses=documented(409), response_model=CampaignOut
)
async def pause_campaign(
    request: Request, session: DbSession, context: OrgWriter, campaign_id: CampaignId
) -> CampaignOut:
    """No new calls start; calls under way finish and report their results."""
    return await _transition(request, session, context, campaign_id, "pause")


@router.post(
    "/{campaignId}/resume", summary="Resume Campaign", responses=documented(409), response_model=CampaignOut
)
async def resume_campaign(
    request: Request, session: DbSession, context: OrgWriter, campaign_id: CampaignId
) -> CampaignOut:
    return await _transition(request, session, context, campaign_id, "resume")


@router.post(
    "/{campaignId}/cancel", summary="Cancel Campaign", responses=documented(409), response_model=CampaignOut
)
async def cancel_campaign(
    request: Request, session: DbSession, context: OrgWriter, campaign_id: CampaignId
) -> CampaignOut:
    """Stop for good: contacts not yet called (or waiting for a retry) become cancelled."""
    return await _transition(request, session, context, campaign_id, "cancel")


# --- contacts --------------------------------------------------------------------------------------

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "phone": {"type": "string"},
                            "variables": {"type": "object", "additionalProperties": True},
                        },
                        "required": ["phone"],
                    },
                }
            },
        },
    }
}


@router.post(
    "/{campaignId}/contacts",
    summary="Upload Campaign Contacts",
    responses=documented(404, 409, 413, 415),
    response_model=UploadOut,
    openapi_extra=_UPLOAD_BODY,
)
async def upload_contacts(
    request: Request, session: DbSession, context: OrgWriter, campaign_id: CampaignId
) -> UploadOut:
    """Add contacts: ``text/csv`` (a header with a phone column, the other columns become the flow's
    start values; UTF-8 with or without BOM; `,` `;` or tab separated; quoted fields) or
    ``application/json`` (``[{"phone", "variables"}]``). All or nothing: any malformed, non-E.164 or
    duplicate number refuses the upload with 422, one entry per bad row (``loc`` ends with the row)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    kinds = {"text/csv": "csv", "application/csv": "csv", "application/json": "json"}
    if content_type not in kinds:
        raise UnsupportedMediaType("Send the contacts as text/csv or application/json.")
    result = await service.upload_contacts(
        session, context.organization_id, campaign_id, request.stream(), kinds[content_type]
    )
    describe(request, "campaign", campaign_id, contacts_added=result.accepted)
    return result


@router.get("/{campaignId}/contacts", summary="List Campaign Contacts", response_model=Page[ContactOut])
async def list_contacts(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    campaign_id: CampaignId,
    status: Annotated[ContactStatus | None, Query(description="Only contacts in this status.")] = None,
    phone: Annotated[str | None, Query(max_length=25, description="Only this number.")] = None,
) -> Page[ContactOut]:
    await service.get_campaign(session, context.organization_id, campaign_id)
    stmt = service.contacts_query(context.organization_id, campaign_id, status, _phone(phone))
    rows, cursor = await paginate(session, stmt, CampaignContact.id, page)
    return Page[ContactOut](items=[service.contact_out(r) for r in rows], next_cursor=cursor)


@router.get(
    "/{campaignId}/contacts/export",
    summary="Export Campaign Results",
    response_class=StreamingResponse,
    response_model=None,
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}, "description": "CSV"}},
)
async def export_contacts(
    request: Request, session: DbSession, context: OrgReader, campaign_id: CampaignId
) -> StreamingResponse:
    """Every contact with its status, attempts, last result and call id, as CSV (UTF-8 with BOM, so
    spreadsheet programs read it), streamed in batches."""
    await service.get_campaign(session, context.organization_id, campaign_id)
    return StreamingResponse(
        service.export_csv(request.app.state.db, context.organization_id, campaign_id),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{campaign_id}-results.csv"'},
    )
