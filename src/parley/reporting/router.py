from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query, Request
from fastapi.responses import Response

from parley.auth.dependencies import OrgReader
from parley.kit.db import DbSession
from parley.kit.filters import Since, Until, text_filter
from parley.kit.routing import ParleyRouter
from parley.reporting import service
from parley.reporting.periods import resolve_range
from parley.reporting.schemas import CallsSummaryOut

router = ParleyRouter(prefix="/api/reporting", tags=["Reporting"])

_CSV_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The summary as JSON, or as CSV with `format=csv` or `Accept: text/csv`.",
        "content": {"text/csv": {"schema": {"type": "string"}}},
    }
}


def _wants_csv(request: Request, format: str | None) -> bool:
    if format is not None:
        return format == "csv"
    accept = request.headers.get("accept", "")
    types = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
    return "text/csv" in types and "application/json" not in types


@router.get(
    "/calls/summary",
    summary="Get Reporting Calls Summary",
    response_model=CallsSummaryOut,
    responses=_CSV_RESPONSE,
)
async def get_reporting_calls_summary(
    request: Request,
    session: DbSession,
    context: OrgReader,
    since: Since = None,
    until: Until = None,
    flow_id: Annotated[str | None, Query(max_length=40, description="Only calls of this flow.")] = None,
    format: Annotated[Literal["json", "csv"] | None, Query(description="json (default) or csv.")] = None,
) -> CallsSummaryOut | Response:
    """Per day (organization time zone; default: the last 30 days): calls, minutes, outcomes, mean and
    p95 voice-to-voice latency, and the most frequent brain signals."""
    start, end = resolve_range(since, until)
    summary = await service.calls_summary(
        session, context.organization_id, start, end, text_filter(flow_id, "flow_id")
    )
    if _wants_csv(request, format):
        return Response(
            service.to_csv(summary),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="calls-summary.csv"'},
        )
    return summary
