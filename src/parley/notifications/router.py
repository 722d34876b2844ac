from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgAdmin, OrgReader, OrgWriter
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.delivery import DeliveryStatus
from parley.kit.errors import documented
from parley.kit.filters import Since, Until
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.responses import JSONBytesResponse
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut, Severity
from parley.kit.tenancy import get_owned
from parley.notifications import service
from parley.notifications.models import NotificationChannel, NotificationDelivery, NotificationRule
from parley.notifications.schemas import (
    ChannelCreate,
    ChannelOut,
    ChannelType,
    ChannelUpdate,
    DeliveryKind,
    DeliveryOut,
    NotificationTestIn,
    RuleCreate,
    RuleOut,
    RuleUpdate,
    TestFailedOut,
)

router = ParleyRouter(prefix="/api/notifications", tags=["Notifications"])

ChannelId = Annotated[str, Path(alias="channelId", max_length=40, description="Channel id (nch_...).")]
RuleId = Annotated[str, Path(alias="ruleId", max_length=40, description="Rule id (nrl_...).")]
DeliveryId = Annotated[str, Path(alias="deliveryId", max_length=40, description="Delivery id (ndl_...).")]


# --- channels ----------------------------------------------------------------------------------


@router.post(
    "/channels", summary="Create Notification Channel", responses=documented(409), response_model=ChannelOut
)
async def create_notification_channel(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[ChannelCreate, ParsedBody(ChannelCreate)],
) -> ChannelOut:
    """Create a webhook, email (SMTP) or Slack channel. Its address must pass the SSRF guard (422
    otherwise); secrets (webhook signing secret, SMTP password, Slack webhook URL) are stored encrypted
    and only shown masked."""
    channel = await service.create_channel(session, request.app.state.settings, context, data)
    describe(request, "notification_channel", channel.id, type=channel.type)
    return service.to_channel_out(channel)


@router.get("/channels", summary="List Notification Channels", response_model=Page[ChannelOut])
async def list_notification_channels(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    type: Annotated[ChannelType | None, Query(description="Only channels of this type.")] = None,
) -> Page[ChannelOut]:
    rows, cursor = await paginate(
        session, service.channels_query(context.organization_id, type), NotificationChannel.id, page
    )
    return Page[ChannelOut](items=[service.to_channel_out(c) for c in rows], next_cursor=cursor)


@router.get("/channels/{channelId}", summary="Get Notification Channel", response_model=ChannelOut)
async def get_notification_channel(
    session: DbSession, context: OrgReader, channel_id: ChannelId
) -> ChannelOut:
    return service.to_channel_out(await service.get_channel(session, context.organization_id, channel_id))


@router.patch(
    "/channels/{channelId}",
    summary="Update Notification Channel",
    responses=documented(409),
    response_model=ChannelOut,
)
async def update_notification_channel(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    channel_id: ChannelId,
    data: Annotated[ChannelUpdate, ParsedBody(ChannelUpdate)],
) -> ChannelOut:
    """Change a channel (its type stays). Secrets left out are kept; ``secret``/``smtp_password`` null
    removes them."""
    channel = await service.update_channel(
        session, request.app.state.settings, context.organization_id, channel_id, data
    )
    describe(request, "notification_channel", channel.id)
    return service.to_channel_out(channel)


@router.delete(
    "/channels/{channelId}",
    summary="Delete Notification Channel",
    responses=documented(409),
    response_model=DeletedOut,
)
async def delete_notification_channel(
    request: Request, session: DbSession, context: OrgAdmin, channel_id: ChannelId
) -> DeletedOut:
    """Delete a channel no rule uses (409 otherwise). Its delivery log stays."""
    channel = await service.delete_channel(session, context.organization_id, channel_id)
    describe(request, "notification_channel", channel.id)
    return DeletedOut(id=channel.id)


# --- rules -------------------------------------------------------------------------------------


@router.post("/rules", summary="Create Notification Rule", response_model=RuleOut)
async def create_notification_rule(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[RuleCreate, ParsedBody(RuleCreate)],
) -> RuleOut:
    """Send brain signals of ``signal_type`` (or ``*``) at ``min_severity`` or above to a channel,
    at most once per ``throttle_minutes`` per signal type when set."""
    rule = await service.create_rule(session, context, data)
    describe(request, "notification_rule", rule.id, channel_id=rule.channel_id)
    return RuleOut.model_validate(rule)


@router.get("/rules", summary="List Notification Rules", response_model=Page[RuleOut])
async def list_notification_rules(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    channel_id: Annotated[str | None, Query(max_length=40, description="Only rules of this channel.")] = None,
    signal_type: Annotated[
        str | None, Query(max_length=60, description="Only rules for this type (or *).")
    ] = None,
) -> Page[RuleOut]:
    stmt = service.rules_query(context.organization_id, channel_id, signal_type)
    rows, cursor = await paginate(session, stmt, NotificationRule.id, page)
    return Page[RuleOut](items=[RuleOut.model_validate(r) for r in rows], next_cursor=cursor)


@router.get("/rules/{ruleId}", summary="Get Notification Rule", response_model=RuleOut)
async def get_notification_rule(session: DbSession, context: OrgReader, rule_id: RuleId) -> RuleOut:
    return RuleOut.model_validate(await service.get_rule(session, context.organization_id, rule_id))


@router.patch("/rules/{ruleId}", summary="Update Notification Rule", response_model=RuleOut)
async def update_notification_rule(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    rule_id: RuleId,
    data: Annotated[RuleUpdate, ParsedBody(RuleUpdate)],
) -> RuleOut:
    rule = await service.update_rule(session, context.organization_id, rule_id, data)
    describe(request, "notification_rule", rule.id)
    return RuleOut.model_validate(rule)


@router.delete("/rules/{ruleId}", summary="Delete Notification Rule", response_model=DeletedOut)
async def delete_notification_rule(
    request: Request, session: DbSession, context: OrgAdmin, rule_id: RuleId
) -> DeletedOut:
    rule = await service.delete_rule(session, context.organization_id, rule_id)
    describe(request, "notification_rule", rule.id)
    return DeletedOut(id=rule.id)


# --- test and delivery log ---------------------------------------------------------------------

_TEST_RESPONSES: dict[int | str, dict[str, object]] = {
    502: {
        "model": TestFailedOut,
        "description": "The channel refused the test message or cannot be reached.",
    },
    504: {"model": TestFailedOut, "description": "The channel did not answer in time."},
}


@router.post(
    "/test",
    summary="Test Notification",
    response_model=DeliveryOut,
    responses={**documented(404), **_TEST_RESPONSES},
)
async def test_notification(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[NotificationTestIn, ParsedBody(NotificationTestIn)],
) -> DeliveryOut | JSONBytesResponse:
    """Send a test message through the channel ``channel_id`` now and return the delivery result.

    200 when the channel accepted it. When it did not, the answer is 502 (refused, unreachable, or the
    address is not allowed) or 504 (no answer in time) with the reason in ``detail`` and the logged
    delivery in ``delivery``. Either way the attempt is in the delivery log (``kind`` test). A
    disabled channel can be tested; tests are never retried.
    """
    delivery, result = await service.test_channel(
        session, request.app.state.settings, context.organization_id, data.channel_id
    )
    describe(
        request, "notification_channel", data.channel_id, delivery_id=delivery.id, outcome=result.outcome
    )
    attempts = await service.attempts_of(session, [delivery])
    out = service.to_delivery_out(delivery, attempts.get(delivery.id))
    if result.outcome == "delivered":
        return out
    timed_out = result.timed_out
    failed = TestFailedOut(
        detail=f"The test message was not delivered: {result.detail}",
        code="notification_timeout" if timed_out else "notification_failed",
        delivery=out,
    )
    return JSONBytesResponse(failed.model_dump(mode="json"), status_code=504 if timed_out else 502)


@router.get("/deliveries", summary="List Notification Deliveries", response_model=Page[DeliveryOut])
async def list_notification_deliveries(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    kind: Annotated[DeliveryKind | None, Query(description="signal or test.")] = None,
    channel_id: Annotated[str | None, Query(max_length=40, description="Only this channel's.")] = None,
    rule_id: Annotated[str | None, Query(max_length=40, description="Only this rule's.")] = None,
    signal_id: Annotated[str | None, Query(max_length=40, description="Only this signal's.")] = None,
    signal_type: Annotated[str | None, Query(max_length=60, description="Only signals of this type.")] = None,
    severity: Annotated[Severity | None, Query(description="Only signals of this severity.")] = None,
    since: Since = None,
    until: Until = None,
) -> Page[DeliveryOut]:
    """The delivery log, newest first, each with its attempts (outcome, HTTP/SMTP code, reason)."""
    filters = service.DeliveryFilters(
        status, kind, channel_id, rule_id, signal_id, signal_type, severity, since, until
    )
    stmt = service.deliveries_query(context.organization_id, filters)
    rows, cursor = await paginate(session, stmt, NotificationDelivery.id, page)
    attempts = await service.attempts_of(session, rows)
    return Page[DeliveryOut](
        items=[service.to_delivery_out(d, attempts.get(d.id)) for d in rows], next_cursor=cursor
    )


@router.get("/deliveries/{deliveryId}", summary="Get Notification Delivery", response_model=DeliveryOut)
async def get_notification_delivery(
    session: DbSession, context: OrgReader, delivery_id: DeliveryId
) -> DeliveryOut:
    delivery = await get_owned(
        session, NotificationDelivery, delivery_id, context.organization_id, "Delivery"
    )
    attempts = await service.attempts_of(session, [delivery])
    return service.to_delivery_out(delivery, attempts.get(delivery.id))
