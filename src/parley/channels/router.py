"""Channel routes, WhatsApp accounts and the WhatsApp webhook (which Meta calls without a bearer)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, Header, Path, Query, Request
from fastapi.responses import PlainTextResponse

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgAdmin, OrgReader, OrgWriter, guard_signed_webhook
from parley.channels import routing, service, whatsapp
from parley.channels.models import ChannelRoute, WhatsAppAccount, WhatsAppMessage
from parley.channels.schemas import (
    AccountCreate,
    AccountOut,
    AccountUpdate,
    ChannelKind,
    MessageOut,
    ResolvedRoute,
    RouteCreate,
    RouteOut,
    RouteUpdate,
    WebhookAck,
)
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import BadRequest, documented
from parley.kit.jobs import runner_for
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/channels", tags=["Channels"])

RouteId = Annotated[str, Path(alias="routeId", max_length=40, description="Route id (rte_...).")]
ADDRESS = r"^[A-Za-z0-9_+() .-]+$"  # numbers, account ids and widget keys (keeps NUL bytes out of SQL)
AccountId = Annotated[str, Path(alias="id", max_length=40, description="WhatsApp account id (wa_...).")]


# --- routes ---------------------------------------------------------------------------------------


@router.post(
    "/routes", summary="Create Channel Route", responses=documented(404, 409), response_model=RouteOut
)
async def create_route(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[RouteCreate, ParsedBody(RouteCreate)],
) -> RouteOut:
    """Route a phone number, WhatsApp account or web widget to a flow, optionally within office hours.

    One route per channel kind and address (409 otherwise); flows and accounts must be this
    organization's (404).
    """
    route = await service.create_route(session, context, data)
    describe(request, "channel_route", route.id, channel_kind=route.channel_kind, address=route.address)
    return service.route_out(route)


@router.get("/routes", summary="List Channel Routes", response_model=Page[RouteOut])
async def list_channel_routes(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    channel_kind: Annotated[
        ChannelKind | None, Query(description="Only routes of this channel kind.")
    ] = None,
    flow_id: Annotated[
        str | None,
        Query(
            max_length=40,
            pattern=r"^[A-Za-z0-9_-]+$",
            description="Only routes answered by this flow (or falling back to it).",
        ),
    ] = None,
    address: Annotated[
        str | None, Query(max_length=80, pattern=ADDRESS, description="Only routes of this address.")
    ] = None,
) -> Page[RouteOut]:
    """The organization's channel routes, newest first."""
    stmt = service.routes_query(context.organization_id, channel_kind, flow_id, address)
    rows, cursor = await paginate(session, stmt, ChannelRoute.id, page)
    return Page[RouteOut](items=[service.route_out(r) for r in rows], next_cursor=cursor)


@router.get("/routes/resolve", summary="Resolve Channel Route", response_model=ResolvedRoute)
async def resolve_channel_route(
    session: DbSession,
    context: OrgReader,
    channel_kind: Annotated[ChannelKind, Query(description="The channel kind.")],
    address: Annotated[
        str,
        Query(min_length=1, max_length=80, pattern=ADDRESS, description="Number, account id or widget key."),
    ],
    at: Annotated[
        datetime | None, Query(description="The moment to ask about (ISO 8601; default now; no offset: UTC).")
    ] = None,
) -> ResolvedRoute:
    """Which flow would answer this address at that moment (office hours and fallback applied)."""
    moment = at or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if not 1900 <= moment.year <= 9000:
        raise BadRequest("at must be a moment between the years 1900 and 9000.")
    resolution = await routing.resolve(
        session, context.organization_id, kind=channel_kind.value, address=address, at=moment
    )
    return ResolvedRoute(
        channel_kind=channel_kind,
        address=routing.normalize_address(channel_kind.value, address),
        at=moment.astimezone(UTC),
        route_id=resolution.route.id if resolution.route else None,
        open=resolution.open,
        flow_id=resolution.flow_id,
    )


@router.get("/routes/{routeId}", summary="Get Channel Route", response_model=RouteOut)
async def get_channel_route(session: DbSession, context: OrgReader, route_id: RouteId) -> RouteOut:
    return service.route_out(await service.get_route(session, context.organization_id, route_id))


@router.patch(
    "/routes/{routeId}", summary="Update Channel Route", responses=documented(409), response_model=RouteOut
)
async def update_channel_route(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    route_id: RouteId,
    data: Annotated[RouteUpdate, ParsedBody(RouteUpdate)],
) -> RouteOut:
    """Change a route; the channel kind is fixed (create another route for another kind)."""
    route = await service.update_route(session, context, route_id, data)
    describe(request, "channel_route", route.id)
    return service.route_out(route)


@router.delete("/routes/{routeId}", summary="Delete Channel Route", response_model=DeletedOut)
async def delete_channel_route(
    request: Request, session: DbSession, context: OrgWriter, route_id: RouteId
) -> DeletedOut:
    route = await service.delete_route(session, context.organization_id, route_id)
    describe(request, "channel_route", route.id)
    return DeletedOut(id=route.id)


# --- WhatsApp accounts ------------------------------------------------------------------------------


@router.post(
    "/whatsapp/accounts",
    summary="Create Channel Account",
    responses=documented(409),
    response_model=AccountOut,
)
async def create_channel_account(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[AccountCreate, ParsedBody(AccountCreate)],
) -> AccountOut:
    """Connect a WhatsApp Cloud API phone number. Tokens and the app secret are encrypted at rest."""
    settings = request.app.state.settings
    account = await service.create_account(session, settings, context, data)
    describe(request, "whatsapp_account", account.id, phone_number_id=account.phone_number_id)
    return service.account_out(settings, account)


@router.get("/whatsapp/accounts", summary="List Channel Accounts", response_model=Page[AccountOut])
async def list_channel_accounts(
    request: Request, session: DbSession, context: OrgReader, page: Pagination
) -> Page[AccountOut]:
    stmt = service.accounts_query(context.organization_id)
    rows, cursor = await paginate(session, stmt, WhatsAppAccount.id, page)
    settings = request.app.state.settings
    return Page[AccountOut](items=[service.account_out(settings, a) for a in rows], next_cursor=cursor)


@router.get("/whatsapp/accounts/{id}", summary="Get Channel Account", response_model=AccountOut)
async def get_channel_account(
    request: Request, session: DbSession, context: OrgReader, account_id: AccountId
) -> AccountOut:
    """One WhatsApp account; its tokens and app secret show only a masked hint."""
    account = await service.get_account(session, context.organization_id, account_id)
    return service.account_out(request.app.state.settings, account)


@router.patch(
    "/whatsapp/accounts/{id}",
    summary="Update Channel Account",
    responses=documented(409),
    response_model=AccountOut,
)
async def update_channel_account(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    account_id: AccountId,
    data: Annotated[AccountUpdate, ParsedBody(AccountUpdate)],
) -> AccountOut:
    """Change an account. Secrets left out (or sent back as their masked hint) are kept."""
    settings = request.app.state.settings
    account = await service.update_account(session, settings, context, account_id, data)
    describe(request, "whatsapp_account", account.id)
    return service.account_out(settings, account)


@router.delete(
    "/whatsapp/accounts/{id}",
    summary="Delete Channel Account",
    responses=documented(409),
    response_model=DeletedOut,
)
async def delete_channel_account(
    request: Request, session: DbSession, context: OrgAdmin, account_id: AccountId
) -> DeletedOut:
    """Disconnect the account and forget its message log (409 while a route still uses it)."""
    account = await service.delete_account(session, context.organization_id, account_id)
    describe(request, "whatsapp_account", account.id)
    return DeletedOut(id=account.id)


@router.get(
    "/whatsapp/accounts/{id}/messages",
    summary="List Channel Account Messages",
    response_model=Page[MessageOut],
)
async def list_channel_account_messages(
    session: DbSession,
    context: OrgReader,
    account_id: AccountId,
    page: Pagination,
    wa_id: Annotated[
        str | None, Query(max_length=40, pattern=r"^[0-9]+$", description="Only this sender's conversation.")
    ] = None,
) -> Page[MessageOut]:
    """Messages received and sent on the account, newest first, with their processing status."""
    await service.get_account(session, context.organization_id, account_id)
    stmt = service.messages_query(context.organization_id, account_id, wa_id)
    rows, cursor = await paginate(session, stmt, WhatsAppMessage.id, page)
    return Page[MessageOut](items=[service.message_out(m) for m in rows], next_cursor=cursor)


# --- the webhook (called by Meta; authenticated by the verify token and the body signature) ---------

WEBHOOK_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "Meta's notification, signed in X-Hub-Signature-256 (HMAC-SHA256 of the raw body).",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["object", "entry"],
                    "properties": {"object": {"type": "string"}, "entry": {"type": "array", "items": {}}},
                }
            }
        },
    }
}


@router.get(
    "/whatsapp/webhook",
    summary="Verify WhatsApp Webhook",
    dependencies=[Depends(guard_signed_webhook)],
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "The challenge."}
    },
)
async def verify_whatsapp_webhook(
    request: Request,
    session: DbSession,
    mode: Annotated[str | None, Query(alias="hub.mode", max_length=40)] = None,
    verify_token: Annotated[str | None, Query(alias="hub.verify_token", max_length=200)] = None,
    challenge: Annotated[str | None, Query(alias="hub.challenge", max_length=200)] = None,
) -> PlainTextResponse:
    """Meta's subscription handshake: echoes ``hub.challenge`` when ``hub.verify_token`` is an account's."""
    answer = await whatsapp.verify_subscription(
        session, request.app.state.settings, mode, verify_token, challenge
    )
    return PlainTextResponse(answer)


@router.post(
    "/whatsapp/webhook",
    summary="Receive WhatsApp Webhook",
    dependencies=[Depends(guard_signed_webhook)],
    response_model=WebhookAck,
    responses=documented(413),
    openapi_extra=WEBHOOK_BODY,
)
async def receive_whatsapp_webhook(
    request: Request,
    session: DbSession,
    x_hub_signature_256: Annotated[
        str | None,
        Header(max_length=200, description="sha256=<hex HMAC of the raw body with the app secret>"),
    ] = None,
) -> WebhookAck:
    """Inbound messages: checked, stored once per wamid and answered in the background (always 200
    for numbers Parley does not know, since Meta retries anything else)."""
    raw = await request.body()
    jobs = runner_for(request.app.state)
    return await whatsapp.receive(session, request.app.state.settings, jobs, raw, x_hub_signature_256)
