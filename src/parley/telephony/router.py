"""Telephony routes: numbers, trunks, dispatch rules, the admin sync, the Twilio voice webhook and
outbound calls."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.responses import Response

from parley.audit.dependencies import describe, request_facts
from parley.auth.dependencies import OrgReader, OrgWriter, guard_signed_webhook
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import ErrorBody, UnsupportedMediaType, documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut
from parley.kit.tenancy import get_owned
from parley.telephony import handover, service
from parley.telephony.models import DispatchRule, PhoneNumber, SipTrunk
from parley.telephony.schemas import (
    DispatchRuleCreate,
    DispatchRuleDeletedOut,
    DispatchRuleOut,
    DispatchRuleUpdate,
    NumberProvider,
    PhoneNumberCreate,
    PhoneNumberOut,
    PhoneNumberUpdate,
    TrunkCreate,
    TrunkOut,
    TrunkUpdate,
)
from parley.voice.transport_twilio import twilio_media_stream

router = ParleyRouter(prefix="/api/telephony", tags=["Telephony"])

NumberId = Annotated[str, Path(alias="numberId", max_length=40, description="Phone number id (pn_...).")]
TrunkId = Annotated[str, Path(alias="trunkId", max_length=40, description="Trunk id (trk_...).")]
RuleId = Annotated[str, Path(alias="id", max_length=40, description="Dispatch rule id (sdr_...).")]
OrgId = Annotated[str, Path(alias="orgId", max_length=40)]


# --- phone numbers ---------------------------------------------------------------------------------


@router.post(
    "/numbers",
    summary="Create Telephony Number",
    responses=documented(404, 409),
    response_model=PhoneNumberOut,
)
async def create_number(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[PhoneNumberCreate, ParsedBody(PhoneNumberCreate)],
) -> PhoneNumberOut:
    """Register a number (E.164) the organization answers, its provider and the flow that answers.

    422 for a malformed number, 404 for an unknown flow, 409 when the number is already registered.
    """
    row = await service.create_number(session, context.organization_id, data)
    describe(request, "phone_number", row.id, number=row.number)
    return service.number_out(row)


@router.get("/numbers", summary="List Telephony Numbers", response_model=Page[PhoneNumberOut])
async def list_numbers(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    provider: Annotated[NumberProvider | None, Query(description="Only numbers of this provider.")] = None,
) -> Page[PhoneNumberOut]:
    rows, cursor = await paginate(
        session, service.numbers_query(context.organization_id, provider), PhoneNumber.id, page
    )
    return Page[PhoneNumberOut](items=[service.number_out(r) for r in rows], next_cursor=cursor)


@router.get("/numbers/{numberId}", summary="Get Telephony Number", response_model=PhoneNumberOut)
async def get_number(session: DbSession, context: OrgReader, number_id: NumberId) -> PhoneNumberOut:
    return service.number_out(
        await get_owned(session, PhoneNumber, number_id, context.organization_id, "Phone number")
    )


@router.patch(
    "/numbers/{numberId}",
    summary="Update Telephony Number",
    responses=documented(409),
    response_model=PhoneNumberOut,
)
async def update_number(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    number_id: NumberId,
    data: Annotated[PhoneNumberUpdate, ParsedBody(PhoneNumberUpdate)],
) -> PhoneNumberOut:
    """Change the number's name, provider or answering flow (``flow_id`` null detaches it)."""
    row = await service.update_number(session, context.organization_id, number_id, data)
    describe(request, "phone_number", row.id)
    return service.number_out(row)


@router.delete("/numbers/{numberId}", summary="Remove Telephony Number", response_model=DeletedOut)
async def delete_number(
    request: Request, session: DbSession, context: OrgWriter, number_id: NumberId
) -> DeletedOut:
    """Forget the number in Parley (the number itself stays in the provider account)."""
    row = await service.delete_number(session, context.organization_id, number_id)
    describe(request, "phone_number", row.id, number=row.number)
    return DeletedOut(id=row.id)


# --- trunks ----------------------------------------------------------------------------------------


@router.post("/trunks", summary="Create Telephony Trunk", responses=documented(409), response_model=TrunkOut)
async def create_trunk(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[TrunkCreate, ParsedBody(TrunkCreate)],
) -> TrunkOut:
    """Create a SIP trunk in LiveKit's model (inbound or outbound); the sync creates it at LiveKit.

    The password is stored encrypted and shown only as a masked hint. 409 for a taken name.
    """
    settings = request.app.state.settings
    row = await service.create_trunk(session, settings, context.organization_id, data)
    describe(request, "sip_trunk", row.id, direction=row.direction)
    return service.trunk_out(settings, row)


@router.get("/trunks", summary="List Telephony Trunks", response_model=Page[TrunkOut])
async def list_trunks(
    request: Request, session: DbSession, context: OrgReader, page: Pagination
) -> Page[TrunkOut]:
    rows, cursor = await paginate(session, service.trunks_query(context.organization_id), SipTrunk.id, page)
    settings = request.app.state.settings
    return Page[TrunkOut](items=[service.trunk_out(settings, r) for r in rows], next_cursor=cursor)


@router.get("/trunks/{trunkId}", summary="Get Telephony Trunk", response_model=TrunkOut)
async def get_trunk(request: Request, session: DbSession, context: OrgReader, trunk_id: TrunkId) -> TrunkOut:
    row = await get_owned(session, SipTrunk, trunk_id, context.organization_id, "Trunk")
    return service.trunk_out(request.app.state.settings, row)


@router.patch(
    "/trunks/{trunkId}", summary="Update Telephony Trunk", responses=documented(409), response_model=TrunkOut
)
async def update_trunk(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    trunk_id: TrunkId,
    data: Annotated[TrunkUpdate, ParsedBody(TrunkUpdate)],
) -> TrunkOut:
    """Change the trunk; the next sync brings LiveKit in line. ``auth_password`` null removes it."""
    settings = request.app.state.settings
    row = await service.update_trunk(session, settings, context.organization_id, trunk_id, data)
    describe(request, "sip_trunk", row.id)
    return service.trunk_out(settings, row)


@router.delete(
    "/trunks/{trunkId}",
    summary="Remove Telephony Trunk",
    responses=documented(409, 502),
    response_model=DeletedOut,
)
async def delete_trunk(
    request: Request, session: DbSession, context: OrgWriter, trunk_id: TrunkId
) -> DeletedOut:
    """Delete the trunk, at LiveKit too when it was synced. 502 (and the trunk kept) when LiveKit fails;
    409 while a dispatch rule uses it."""
    row, _ = await service.delete_trunk(
        session, request.app.state.settings, context.organization_id, trunk_id
    )
    describe(request, "sip_trunk", row.id)
    return DeletedOut(id=row.id)


# --- dispatch rules --------------------------------------------------------------------------------


@router.post(
    "/dispatch-rules",
    summary="Create Telephony Dispatch Rule",
    responses=documented(404, 409),
    response_model=DispatchRuleOut,
)
async def create_dispatch_rule(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[DispatchRuleCreate, ParsedBody(DispatchRuleCreate)],
) -> DispatchRuleOut:
    """Create a dispatch rule in LiveKit's model (individual, direct or callee) with the flow it dispatches.

    404 for an unknown flow or trunk, 409 for a taken name. The sync creates it at LiveKit.
    """
    row = await service.create_rule(session, request.app.state.settings, context.organization_id, data)
    describe(request, "dispatch_rule", row.id, rule_type=row.rule_type)
    return service.rule_out(row)


@router.get("/dispatch-rules", summary="List Telephony Dispatch Rules", response_model=Page[DispatchRuleOut])
async def list_dispatch_rules(
    session: DbSession, context: OrgReader, page: Pagination
) -> Page[DispatchRuleOut]:
    rows, cursor = await paginate(
        session, service.rules_query(context.organization_id), DispatchRule.id, page
    )
    return Page[DispatchRuleOut](items=[service.rule_out(r) for r in rows], next_cursor=cursor)


@router.get("/dispatch-rules/{id}", summary="Get Telephony Dispatch Rule", response_model=DispatchRuleOut)
async def get_dispatch_rule(session: DbSession, context: OrgReader, rule_id: RuleId) -> DispatchRuleOut:
    return service.rule_out(
        await get_owned(session, DispatchRule, rule_id, context.organization_id, "Dispatch rule")
    )


@router.patch(
    "/dispatch-rules/{id}",
    summary="Update Telephony Dispatch Rule",
    responses=documented(409),
    response_model=DispatchRuleOut,
)
async def update_dispatch_rule(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    rule_id: RuleId,
    data: Annotated[DispatchRuleUpdate, ParsedBody(DispatchRuleUpdate)],
) -> DispatchRuleOut:
    """Change the rule; the next sync brings LiveKit in line. ``pin`` null removes the PIN."""
    row = await service.update_rule(
        session, request.app.state.settings, context.organization_id, rule_id, data
    )
    describe(request, "dispatch_rule", row.id)
    return service.rule_out(row)


@router.delete(
    "/dispatch-rules/{id}",
    summary="Remove Telephony Dispatch Rule",
    responses=documented(409, 502),
    response_model=DispatchRuleDeletedOut,
)
async def remove_telephony_dispatch_rule(
    request: Request, session: DbSession, context: OrgWriter, rule_id: RuleId
) -> DispatchRuleDeletedOut:
    """Delete the dispatch rule; when it was synced, delete it at LiveKit first.

    502 with LiveKit's reason when the provider fails — the rule is then kept, here and there. 409 when
    the rule was synced but LiveKit is no longer configured.
    """
    row, provider_deleted = await service.delete_rule(
        session, request.app.state.settings, context.organization_id, rule_id
    )
    describe(request, "dispatch_rule", row.id, provider_deleted=provider_deleted)
    return DispatchRuleDeletedOut(id=row.id, provider_deleted=provider_deleted)


# --- admin sync ------------------------------------------------------------------------------------


# --- Twilio voice webhook --------------------------------------------------------------------------

TWIML_DOC = "TwiML: connect the call's media stream to Parley, or a spoken message and a hang-up."
_FORM = "application/x-www-form-urlencoded"


@router.post(
    "/twilio/voice",
    summary="Twilio Voice Webhook",
    dependencies=[Depends(guard_signed_webhook)],
    response_class=Response,
    responses={
        200: {"content": {"application/xml": {"schema": {"type": "string"}}}, "description": TWIML_DOC},
        403: {
            "model": ErrorBody,
            "description": "The X-Twilio-Signature is missing or does not match, or CallSid, AccountSid, "
            "From or To is missing, repeated or not in Twilio's format.",
        },
        415: {"model": ErrorBody, "description": "The body is not form-encoded."},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                _FORM: {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "CallSid": {"type": "string"},
                            "AccountSid": {"type": "string"},
                            "From": {"type": "string"},
                            "To": {"type": "string"},
                        },
                    }
                }
            },
        }
    },
)
async def twilio_voice(request: Request, session: DbSession) -> Response:
    """Twilio's voice webhook for incoming calls (form-encoded, as Twilio sends it; signed, not bearer).

    The signature is checked over ``PARLEY_PUBLIC_URL`` + this path. A known number starts a phone
    session on the flow routed to it and answers TwiML connecting the media stream; a retry with the
    same CallSid reuses that session. An unknown number hears a short message, then the call hangs up.
    """
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != _FORM:
        raise UnsupportedMediaType("Twilio webhooks are application/x-www-form-urlencoded.")
    form = await request.form()
    params = [(key, value) for key, value in form.multi_items() if isinstance(value, str)]
    twiml, organization_id, session_id = await service.answer_twilio_call(
        session,
        request.app.state.settings,
        params,
        request.headers.get("x-twilio-signature"),
        request.url.query,
    )
    if session_id is not None and organization_id is not None:
        service.audit_webhook(session, request_facts(request), organization_id, session_id)
    return Response(twiml, media_type="application/xml")


@router.post("/twilio/dial", include_in_schema=False)
async def twilio_dial(
    request: Request,
    session: DbSession,
    session_id: Annotated[str, Query(alias="session", max_length=40)],
) -> Response:
    """Twilio's report on a transfer's ``<Dial>`` (its ``action`` and the dialled number's
    ``answered`` callback), signed like the voice webhook. Answers TwiML: hang up after a completed
    transfer, or a new media stream that brings the caller back into the flow (docs/telephony.md)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != _FORM:
        raise UnsupportedMediaType("Twilio webhooks are application/x-www-form-urlencoded.")
    form = await request.form()
    params = [(key, value) for key, value in form.multi_items() if isinstance(value, str)]
    twiml = await handover.answer_dial_callback(
        session,
        request.app.state.settings,
        session_id,
        params,
        request.headers.get("x-twilio-signature"),
        request.url.query,
    )
    return Response(twiml, media_type="application/xml")


# --- outbound calls --------------------------------------------------------------------------------


# Twilio's media stream for the calls answered above, spoken by the voice pipeline's Twilio transport.
router.add_api_websocket_route("/twilio/media", twilio_media_stream, name="twilio_media_stream")
