"""Brain signals: listing with filters, and working them through open → acknowledged → resolved."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.brain.models import BrainSignal
from parley.brain.schemas import SignalUpdate
from parley.kit.db import utcnow
from parley.kit.errors import Conflict
from parley.kit.tenancy import get_owned

# Which status a signal may move to from each status.
TRANSITIONS = {
    "open": {"acknowledged", "resolved"},
    "acknowledged": {"resolved"},
    "resolved": set[str](),
}


async def get_signal(session: AsyncSession, context: OrgContext, signal_id: str) -> BrainSignal:
    return await get_owned(session, BrainSignal, signal_id, context.organization_id, "Brain signal")


async def update_signal(
    session: AsyncSession, context: OrgContext, signal_id: str, data: SignalUpdate
) -> BrainSignal:
    signal = await get_signal(session, context, signal_id)
    if data.status not in TRANSITIONS[signal.status]:
        allowed = sorted(TRANSITIONS[signal.status])
        next_steps = f"it can only become {' or '.join(allowed)}" if allowed else "it cannot change any more"
        raise Conflict(f"Brain signal {signal.id!r} is {signal.status}; {next_steps}.")
    now = utcnow()
    if data.status == "acknowledged":
        signal.acknowledged_by, signal.acknowledged_at = context.principal.id, now
    else:
        signal.resolved_by, signal.resolved_at = context.principal.id, now
    signal.status = data.status
    if data.note is not None:
        signal.note = data.note
    await session.flush()
    return signal
