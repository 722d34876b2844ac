"""Typed query filters shared by the call list and the monitoring history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Query
from sqlalchemy import Select, select

from parley.brain.models import BrainSignal
from parley.calls.contracts import Channel, Outcome
from parley.calls.models import Call
from parley.kit.filters import Since, Until, as_utc, text_filter


@dataclass(frozen=True)
class CallFilters:
    since: datetime | None
    until: datetime | None
    flow_id: str | None
    channel: str | None
    outcome: str | None
    caller: str | None
    has_signal: bool | None
    signal_type: str | None

    def apply(self, stmt: Select[Any], organization_id: str) -> Select[Any]:
        if self.since is not None:
            stmt = stmt.where(Call.started_at >= self.since)
        if self.until is not None:
            stmt = stmt.where(Call.started_at < self.until)
        if self.flow_id is not None:
            stmt = stmt.where(Call.flow_id == self.flow_id)
        if self.channel is not None:
            stmt = stmt.where(Call.channel == self.channel)
        if self.outcome is not None:
            stmt = stmt.where(Call.outcome == self.outcome)
        if self.caller is not None:
            stmt = stmt.where(Call.caller == self.caller)
        if self.has_signal is not None:
            stmt = stmt.where(Call.has_signals.is_(self.has_signal))
        if self.signal_type is not None:
            with_type = select(BrainSignal.call_id).where(
                BrainSignal.organization_id == organization_id, BrainSignal.type == self.signal_type
            )
            stmt = stmt.where(Call.id.in_(with_type))
        return stmt


async def _call_filters(
    since: Since = None,
    until: Until = None,
    flow_id: Annotated[str | None, Query(max_length=40, description="Only calls of this flow.")] = None,
    channel: Annotated[Channel | None, Query(description="Only calls on this channel.")] = None,
    outcome: Annotated[Outcome | None, Query(description="Only calls that ended this way.")] = None,
    caller: Annotated[str | None, Query(max_length=200, description="Only calls from this caller.")] = None,
    has_signal: Annotated[
        bool | None,
        Query(description="true: only calls that raised a brain signal; false: only calls without."),
    ] = None,
    signal_type: Annotated[
        str | None, Query(max_length=60, description="Only calls that raised a signal of this type.")
    ] = None,
) -> CallFilters:
    return CallFilters(
        since=as_utc(since, "since"),
        until=as_utc(until, "until"),
        flow_id=text_filter(flow_id, "flow_id"),
        channel=channel,
        outcome=outcome,
        caller=text_filter(caller, "caller"),
        has_signal=has_signal,
        signal_type=text_filter(signal_type, "signal_type"),
    )


CallFilter = Annotated[CallFilters, Depends(_call_filters)]
