"""Typed query filters shared by the call list and the monitoring history."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from sqlalchemy import ColumnElement, Select, bindparam, literal_column, select

from parley.brain.models import BrainSignal
from parley.calls.analysis import canonical
from parley.calls.contracts import Channel, Direction, Outcome
from parley.calls.models import Call
from parley.kit.errors import BadRequest
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
    direction: str | None = None
    # (field, canonical text) pairs from ``analysis.<field>=<value>`` query parameters, all must match
    analysis: tuple[tuple[str, str], ...] = ()

    def shape(self) -> tuple[Any, ...]:
        """Which filters are set (and ``has_signal``'s value, which the SQL spells out): requests of one
        shape share one statement, their values bound (``values``)."""
        return (
            self.since is not None,
            self.until is not None,
            self.flow_id is not None,
            self.channel is not None,
            self.outcome is not None,
            self.direction is not None,
            self.caller is not None,
            self.has_signal,
            self.signal_type is not None,
            tuple(name for name, _ in self.analysis),
        )

    def apply(self, stmt: Select[Any]) -> Select[Any]:
        """``stmt`` (a select from the calls table) narrowed by the set filters, each compared with a bound
        parameter named as in ``values`` (so the statement can be built once per ``shape``)."""
        calls = Call.__table__.c
        if self.since is not None:
            stmt = stmt.where(calls.started_at >= bindparam("since"))
        if self.until is not None:
            stmt = stmt.where(calls.started_at < bindparam("until"))
        for name in ("flow_id", "channel", "outcome", "direction", "caller"):
            if getattr(self, name) is not None:
                stmt = stmt.where(self._compared(name) == bindparam(name))
        if self.has_signal is not None:
            stmt = stmt.where(calls.has_signals.is_(self.has_signal))
        if self.signal_type is not None:
            signals = BrainSignal.__table__.c
            with_type = select(signals.call_id).where(
                signals.organization_id == bindparam("organization_id"),
                signals.type == bindparam("signal_type"),
            )
            stmt = stmt.where(calls.id.in_(with_type))
        for index, (name, _) in enumerate(self.analysis):
            stmt = stmt.where(calls.extracted_index[name].as_string() == bindparam(f"analysis_{index}"))
        return stmt

    def _compared(self, name: str) -> ColumnElement[Any]:
        """The column a filter compares. A caller has few calls, so with a caller the walk is the caller's
        index, (organization_id, caller, id): the outcome is then compared as ``outcome || ''`` (the same
        text, the column is never null), which no index serves. Without statistics SQLite's planner sees
        the outcome's index, (organization_id, outcome, id), as just as good, and would walk every call
        with that outcome to find the caller's."""
        column: ColumnElement[Any] = Call.__table__.c[name]
        if name == "outcome" and self.caller is not None:
            return column + literal_column("''")
        return column

    def values(self) -> dict[str, Any]:
        """The bound values of the statement ``apply`` built."""
        values: dict[str, Any] = {}
        for name in ("since", "until", "flow_id", "channel", "outcome", "direction", "caller", "signal_type"):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        for index, (_, text) in enumerate(self.analysis):
            values[f"analysis_{index}"] = text
        return values


ANALYSIS_PREFIX = "analysis."
_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
MAX_ANALYSIS_FILTERS = 10


def analysis_filters(request: Request) -> tuple[tuple[str, str], ...]:
    """``analysis.<field>=<value>`` query parameters (any number, AND-ed): calls whose extracted field
    has that value, compared as canonical text (true/false, numbers, text without regard to case)."""
    found: list[tuple[str, str]] = []
    for key, value in request.query_params.multi_items():
        if not key.startswith(ANALYSIS_PREFIX):
            continue
        name = key[len(ANALYSIS_PREFIX) :]
        if not _FIELD.fullmatch(name):
            raise BadRequest(
                f"{key!r} does not name an analysis field; use analysis.<field>=<value> with the field's "
                "name as the flow declares it (letters, digits, underscores)."
            )
        if "\x00" in value or len(value) > 500:
            raise BadRequest(f"The value of {key!r} must be text of at most 500 characters without NUL.")
        text = canonical(value) if value.strip() else None
        if text is None:
            raise BadRequest(f"{key!r} needs a value.")
        found.append((name, text))
    if len(found) > MAX_ANALYSIS_FILTERS:
        raise BadRequest(f"At most {MAX_ANALYSIS_FILTERS} analysis.<field> filters may be combined.")
    return tuple(found)


async def _call_filters(
    request: Request,
    since: Since = None,
    until: Until = None,
    flow_id: Annotated[str | None, Query(max_length=40, description="Only calls of this flow.")] = None,
    channel: Annotated[Channel | None, Query(description="Only calls on this channel.")] = None,
    outcome: Annotated[Outcome | None, Query(description="Only calls that ended this way.")] = None,
    direction: Annotated[
        Direction | None,
        Query(description="inbound: calls that reached the agent; outbound: calls the platform placed."),
    ] = None,
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
        direction=direction,
        caller=text_filter(caller, "caller"),
        has_signal=has_signal,
        signal_type=text_filter(signal_type, "signal_type"),
        analysis=analysis_filters(request),
    )


CallFilter = Annotated[CallFilters, Depends(_call_filters)]
