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
from parley.kit.schemas import DeletedOut
from parley.webhooks import service
from parley.webhooks.models import WebhookDelivery, WebhookSubscription
from parley.webhooks.schemas import (
    DeliveryDetailOut,
    DeliveryKind,
    DeliveryOut,
    EventType,
    SubscriptionCreate,
    SubscriptionOut,
    SubscriptionTestIn,
    SubscriptionUpdate,
    TestFailedOut,
)

router = ParleyRouter(prefix="/api/webhooks", tags=["Webhooks"])

SubscriptionId = Annotated[
    str, Path(alias="subscriptionId", max_length=40, description="Subscription id (whs_...).")
]
DeliveryId = Annotated[str, Path(alias="deliveryId", max_length=40, description="Delivery id (whd_...).")]


@router.post("/subscriptions", summary="Create Webhook Subscription", response_model=SubscriptionOut)
async def create_webhook_subscription(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    data: Annotated[SubscriptionCreate, ParsedBody(SubscriptionCreate)],
) -> SubscriptionOut:
    """Send the organization's call events of ``event_types`` to ``url``, signed with ``secret``
    (HMAC-SHA256, header ``X-Parley-Signature``). The URL must pass the SSRF guard (422 otherwise); the
    secret is stored encrypted and only shown masked."""
    subscription = await service.create_subscription(session, request.app.state.settings, context, data)
    describe(request, "webhook_subscription", subscription.id)
    return service.to_subscription_out(subscription)


@router.get("/subscriptions", summary="List Webhook Subscriptions", response_model=Page[SubscriptionOut])
async def list_webhook_subscriptions(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    active: Annotated[bool | None, Query(description="Only active (true) or paused (false) ones.")] = None,
) -> Page[SubscriptionOut]:
    stmt = service.subscriptions_query(context.organization_id, active)
    rows, cursor = await paginate(session, stmt, WebhookSubscription.id, page)
    return Page[SubscriptionOut](items=[service.to_subscription_out(s) for s in rows], next_cursor=cursor)


@router.get(
    "/subscriptions/{subscriptionId}", summary="Get Webhook Subscription", response_model=SubscriptionOut
)
async def get_webhook_subscription(
    session: DbSession, context: OrgReader, subscription_id: SubscriptionId
) -> SubscriptionOut:
    subscription = await service.get_subscription(session, context.organization_id, subscription_id)
    return service.to_subscription_out(subscription)


@router.patch(
    "/subscriptions/{subscriptionId}", summary="Update Webhook Subscription", response_model=SubscriptionOut
)
async def update_webhook_subscription(
    request: Request,
    session: DbSession,
    context: OrgAdmin,
    subscription_id: SubscriptionId,
    data: Annotated[SubscriptionUpdate, ParsedBody(SubscriptionUpdate)],
) -> SubscriptionOut:
    """Change the URL, event types, secret (rotation), description, or pause it (``active: false``)."""
    subscription = await service.update_subscription(
        session, request.app.state.settings, context.organization_id, subscription_id, data
    )
    describe(request, "webhook_subscription", subscription.id)
    return service.to_subscription_out(subscription)


@router.delete(
    "/subscriptions/{subscriptionId}", summary="Delete Webhook Subscription", response_model=DeletedOut
)
async def delete_webhook_subscription(
    request: Request, session: DbSession, context: OrgAdmin, subscription_id: SubscriptionId
) -> DeletedOut:
    """Delete a subscription. Its delivery log stays; deliveries still waiting end as failed."""
    subscription = await service.delete_subscription(session, context.organization_id, subscription_id)
    describe(request, "webhook_subscription", subscription.id)
    return DeletedOut(id=subscription.id)


_TEST_RESPONSES: dict[int | str, dict[str, object]] = {
    502: {"model": TestFailedOut, "description": "The receiver refused the test event or cannot be reached."},
    504: {"model": TestFailedOut, "description": "The receiver did not answer in time."},
}


@router.post(
    "/subscriptions/{subscriptionId}/test",
    summary="Test Webhook Subscription",
    response_model=DeliveryOut,
    responses={**documented(404), **_TEST_RESPONSES},
)
async def test_webhook_subscription(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    subscription_id: SubscriptionId,
    data: Annotated[SubscriptionTestIn, ParsedBody(SubscriptionTestIn)],
) -> DeliveryOut | JSONBytesResponse:
    """Send a signed sample of ``event_type`` (with ``"test": true``) to the subscription now, active or
    not, and return the delivery. 200 when the receiver answered 2xx; otherwise 502 (refused,
    unreachable, not allowed) or 504 (no answer in time) with the reason in ``detail``. Either way the
    attempt is in the delivery log (``kind`` test); tests are never retried."""
    delivery, result = await service.test_subscription(
        session, request.app.state.settings, context.organization_id, subscription_id, data.event_type
    )
    describe(
        request, "webhook_subscription", subscription_id, delivery_id=delivery.id, outcome=result.outcome
    )
    attempts = await service.attempts_of(session, [delivery])
    out = service.to_delivery_out(delivery, attempts.get(delivery.id))
    if result.outcome == "delivered":
        return out
    failed = TestFailedOut(
        detail=f"The test event was not delivered: {result.error}",
        code="webhook_timeout" if result.timed_out else "webhook_failed",
        delivery=out,
    )
    return JSONBytesResponse(failed.model_dump(mode="json"), status_code=504 if result.timed_out else 502)


@router.get("/deliveries", summary="List Webhook Deliveries", response_model=Page[DeliveryOut])
async def list_webhook_deliveries(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    subscription_id: Annotated[
        str | None, Query(max_length=40, description="Only this subscription's deliveries.")
    ] = None,
    event_type: Annotated[EventType | None, Query(description="Only events of this type.")] = None,
    status: Annotated[DeliveryStatus | None, Query(description="Only deliveries in this status.")] = None,
    kind: Annotated[DeliveryKind | None, Query(description="event or test.")] = None,
    since: Since = None,
    until: Until = None,
) -> Page[DeliveryOut]:
    """The delivery log, newest first, each with its attempts (outcome, HTTP status, latency, error,
    the start of the receiver's answer)."""
    filters = service.DeliveryFilters(subscription_id, event_type, status, kind, since, until)
    stmt = service.deliveries_query(context.organization_id, filters)
    rows, cursor = await paginate(session, stmt, WebhookDelivery.id, page)
    attempts = await service.attempts_of(session, rows)
    return Page[DeliveryOut](
        items=[service.to_delivery_out(d, attempts.get(d.id)) for d in rows], next_cursor=cursor
    )


@router.get("/deliveries/{deliveryId}", summary="Get Webhook Delivery", response_model=DeliveryDetailOut)
async def get_webhook_delivery(
    session: DbSession, context: OrgReader, delivery_id: DeliveryId
) -> DeliveryDetailOut:
    """One delivery with its attempts and the exact JSON body it sends."""
    return await service.delivery_detail(session, context.organization_id, delivery_id)
