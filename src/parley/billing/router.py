from __future__ import annotations

from typing import Annotated

from fastapi import Query

from parley.auth.dependencies import OrgReader
from parley.billing import service
from parley.billing.schemas import UsageOut
from parley.kit.db import DbSession
from parley.kit.filters import Since, Until
from parley.kit.routing import ParleyRouter
from parley.reporting.periods import Granularity, resolve_range

router = ParleyRouter(prefix="/api/billing", tags=["Billing"])


@router.get("/usage", summary="Get Billing Usage", response_model=UsageOut)
async def get_billing_usage(
    session: DbSession,
    context: OrgReader,
    since: Since = None,
    until: Until = None,
    granularity: Annotated[Granularity, Query(description="Periods of a day or a month.")] = "day",
) -> UsageOut:
    """Usage per day or month in the organization's time zone (default: the last 30 days): calls,
    minutes (each call rounded up to the second), LLM tokens, TTS characters and STT seconds."""
    start, end = resolve_range(since, until)
    return await service.usage(session, context.organization_id, start, end, granularity)
