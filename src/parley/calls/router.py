from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request, Response
from fastapi.responses import StreamingResponse

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.calls import service
from parley.calls.filters import CallFilter
from parley.calls.schemas import CallOut, CallSummaryOut, OutboundCallIn, OutboundCallOut
from parley.kit.blobs import BlobStore
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import ErrorBody, documented
from parley.kit.pagination import Page, Pagination
from parley.kit.routing import ParleyRouter

router = ParleyRouter(prefix="/api/calls", tags=["Calls"])
# Included after telephony's routes (parley.app) so the API document keeps its order.
outbound_router = ParleyRouter(prefix="/api/calls", tags=["Calls"])

CallId = Annotated[str, Path(alias="callId", max_length=40, description="Call id (call_...).")]
Filename = Annotated[
    str, Path(max_length=300, description="The recording's file name, as shown on the call (`....wav`).")
]

_WAV = {"audio/wav": {"schema": {"type": "string", "format": "binary"}}}
_RECORDING_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The whole recording (WAV), as an attachment.", "content": _WAV},
    206: {"description": "The requested byte range (`Range: bytes=start-end`).", "content": _WAV},
    416: {"model": ErrorBody, "description": "The byte range starts past the end of the file."},
    **documented(503),
}


@router.get("", summary="List Calls", response_model=Page[CallSummaryOut])
async def list_calls(
    session: DbSession, context: OrgReader, page: Pagination, filters: CallFilter
) -> Response:
    """The organization's call records, newest first (by start time)."""
    body = await service.list_calls(session, context.organization_id, filters, page)
    return Response(body, media_type="application/json")


@router.get(
    "/recording-file/{filename}",
    summary="Get Call Recording File",
    response_class=StreamingResponse,
    response_model=None,
    responses=_RECORDING_RESPONSES,
)
async def get_call_recording_file(
    request: Request, session: DbSession, context: OrgReader, filename: Filename
) -> StreamingResponse:
    """Download a call's recording (`audio/wav`, attachment). Supports single byte ranges. Names are
    looked up among the organization's calls; any other name is 404."""
    blobs: BlobStore = request.app.state.blobs
    recording = await service.open_recording(session, blobs, context, filename, request.headers.get("range"))
    return StreamingResponse(
        recording.chunks, status_code=recording.status, media_type="audio/wav", headers=recording.headers
    )


@router.get("/{callId}", summary="Get Call", response_model=CallOut)
async def get_call(session: DbSession, context: OrgReader, call_id: CallId) -> CallOut:
    """The full call record: transcript with timestamps, tool calls, latency metrics, usage, signals."""
    return await service.to_full(session, await service.get_call(session, context, call_id))


@outbound_router.post(
    "/outbound",
    summary="Create Outbound Call",
    responses=documented(404, 409, 502),
    response_model=OutboundCallOut,
)
async def create_outbound_call(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[OutboundCallIn, ParsedBody(OutboundCallIn)],
) -> OutboundCallOut:
    """Call ``to`` from one of the organization's numbers; the flow talks once the call is answered.

    Twilio numbers dial through Twilio's Calls API; LiveKit numbers through a synced outbound trunk that
    carries ``from_number``. 404 unknown flow or number, 409 no published flow or no way to dial,
    422 malformed numbers, 502 when the provider refuses (with its reason; nothing is kept).
    """
    dialer: service.Dialer = request.app.state.outbound_dialer
    result = await dialer(session, request.app.state.settings, context, data)
    describe(request, "session", result.session_id, to=result.to, provider=result.provider)
    return result
