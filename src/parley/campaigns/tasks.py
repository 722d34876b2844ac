"""Campaign jobs: dialing rounds and answering-machine handling (registered at import; listed in
``parley/worker.py``)."""

from __future__ import annotations

import asyncio

import structlog

from parley.campaigns import service
from parley.kit.db import utcnow
from parley.kit.ids import new_id
from parley.kit.jobs import JobContext, Payload, registry, runner_for

log = structlog.get_logger("parley.campaigns")


async def _dial_one(ctx: JobContext, claim: service.Claim) -> str:
    try:
        async with ctx.unit() as session:
            return await service.dial(session, ctx.settings, claim)
    except Exception as exc:  # the claim stays "dialing"; its lease runs out and it is not called again
        log.error(
            "campaign_dial_failed", contact_id=claim.contact_id, error_type=type(exc).__name__, exc_info=exc
        )
        return "error"


async def tick(ctx: JobContext, payload: Payload) -> None:
    """One dialing round of a running campaign: claim (committed before any dial), dial outside any
    transaction, then schedule the follow-up round.

    Payloads: ``{"campaign_id"}`` is a nudge (start, resume, a finished call, recovery at start-up);
    ``{"campaign_id", "round"}`` a scheduled follow-up, which runs only while it is the wanted one. A
    nudge that finds another round holding the campaign looks again when that lease runs out (its
    holder may have died)."""
    campaign_id = str(payload["campaign_id"])
    scheduled = payload.get("round")
    holder = new_id("rnd")
    queue = runner_for(ctx.state)
    now = utcnow()
    left: float | None = None
    async with ctx.unit() as session:
        campaign = await service.lease_round(session, campaign_id, holder, now, scheduled)
        if campaign is None:
            left = await service.lease_left(session, campaign_id, now)
        else:
            plan = await service.plan_round(session, ctx.settings, campaign, now)
    if campaign is None:
        if scheduled is None and left and not payload.get("after_lease"):
            queue.enqueue_later(service.TICK_JOB, {**payload, "after_lease": True}, left + 1.0)
        return
    # A round claims at most service.MAX_CLAIMS_PER_ROUND and each dial waits at most the outbound
    # time-out, so it ends well within its lease. The dials run side by side, except with a runner
    # that only runs when drained (workers=0): its database may be one shared connection (tests).
    if getattr(queue, "workers", 1) == 0:
        results = [await _dial_one(ctx, claim) for claim in plan.claims]
    else:
        results = list(await asyncio.gather(*(_dial_one(ctx, claim) for claim in plan.claims)))
    if plan.claims:
        log.info("campaign_round", campaign_id=campaign_id, dialed=len(plan.claims), results=sorted(results))
    follow_up = new_id("rnd") if plan.wait is not None else None
    async with ctx.unit() as session:
        await service.release_round(session, campaign_id, holder, follow_up)
    if plan.wait is not None:
        queue.enqueue_later(
            service.TICK_JOB,
            {
                "campaign_id": campaign_id,
                "organization_id": payload.get("organization_id"),
                "round": follow_up,
            },
            plan.wait,
        )


async def voicemail(ctx: JobContext, payload: Payload) -> None:
    """An answering machine took a campaign call: leave the message or hang up."""
    async with ctx.unit() as session:
        await service.handle_machine(
            session, ctx.settings, str(payload["contact_id"]), str(payload["call_sid"])
        )


registry.register(service.TICK_JOB, tick, recover=service.running_campaigns)
registry.register(service.VOICEMAIL_JOB, voicemail)
