"""The brain's background job: the LLM sentiment classifier (:mod:`parley.brain.sentiment`).

The handler reads and marks the call only through :class:`parley.brain.contracts.SignalledCalls`;
``calls`` hands its implementation over when it registers the job (``parley.calls.tasks``).
"""

from __future__ import annotations

from typing import Any

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.contracts import SignalledCalls
from parley.brain.models import BrainSignal
from parley.brain.sentiment import (
    PROVIDER,
    SIGNAL_SEVERITY,
    SIGNAL_TYPE,
    USAGE_SOURCE,
    Verdict,
    ask,
    caller_text,
    parse_verdict,
    provider_config,
)
from parley.brain.service import Raised, raise_signals
from parley.config import Settings
from parley.kit.errors import ParleyError
from parley.kit.ids import new_id
from parley.kit.jobs import JobContext, JobHandler, Payload
from parley.kit.tenancy import scoped
from parley.llm.models import LLMUsage

log = structlog.get_logger("parley.brain.sentiment")


async def _sentiment_signal(session: AsyncSession, organization_id: str, call_id: str) -> BrainSignal | None:
    """The rule's ``negative_sentiment`` signal of the call (keyword or LLM), if any."""
    rows = await session.scalars(
        scoped(BrainSignal, organization_id)
        .where(
            BrainSignal.call_id == call_id,
            BrainSignal.type == SIGNAL_TYPE,
            BrainSignal.source == "rule",
        )
        .order_by(BrainSignal.id)
    )
    return rows.first()


async def classify_call(ctx: JobContext, payload: Payload, calls: SignalledCalls) -> None:
    """The job: classify one call's caller turns and raise or upgrade its sentiment signal."""
    call_id = str(payload.get("call_id") or "")
    settings: Settings = ctx.settings
    # Read, then talk to the model without holding a transaction, then write briefly.
    async with ctx.unit(write=False) as session:
        call = await calls.facts(session, call_id)
        if call is None:
            return  # deleted in the meantime
        existing = await _sentiment_signal(session, call.organization_id, call.id)
        if existing is not None and existing.details.get("method") == "llm":
            return  # already classified
        config = await provider_config(session, settings, call.organization_id)
        text = caller_text(call.transcript)
        organization_id = call.organization_id
    if config is None or not text:
        return
    try:
        completion = await ask(settings, config, text)
    except ParleyError as exc:
        log.warning("sentiment_llm_failed", call_id=call_id, error_type=type(exc).__name__, reason=exc.detail)
        return
    verdict = parse_verdict(completion.content)
    if verdict is None:
        log.warning("sentiment_llm_unparsable", call_id=call_id)
    try:
        async with ctx.unit() as session:  # notification deliveries for the new signal queue after commit
            session.add(
                LLMUsage(
                    id=new_id("llmu"),
                    organization_id=organization_id,
                    provider=PROVIDER,
                    model=(completion.model or config.model)[:120],
                    source=USAGE_SOURCE,
                    prompt_tokens=completion.usage.prompt_tokens,
                    completion_tokens=completion.usage.completion_tokens,
                    actor_id=None,
                )
            )
            if verdict is not None and verdict.negative:
                await _raise_signal(session, calls, call_id, verdict)
    except SQLAlchemyError as exc:  # e.g. the organization was deleted meanwhile
        log.warning("sentiment_store_failed", call_id=call_id, error_type=type(exc).__name__)
        return
    log.info(
        "sentiment_classified",
        call_id=call_id,
        sentiment=verdict.sentiment if verdict else None,
        confidence=verdict.confidence if verdict else None,
    )


async def _raise_signal(session: AsyncSession, calls: SignalledCalls, call_id: str, verdict: Verdict) -> None:
    call = await calls.facts(session, call_id)
    if call is None:
        return
    details: dict[str, Any] = {
        "method": "llm",
        "confidence": round(verdict.confidence, 3),
        "reason": verdict.reason,
    }
    existing = await _sentiment_signal(session, call.organization_id, call.id)
    if existing is not None:
        if existing.details.get("method") == "llm":
            return
        # The keyword rule already raised it: upgrade its details, keeping the matched turns.
        keyword_turns = existing.details.get("turns")
        existing.details = {**details, "keyword_turns": keyword_turns} if keyword_turns else details
    else:
        await calls.note_signal(session, call.id, SIGNAL_TYPE)
        raised = Raised(SIGNAL_TYPE, SIGNAL_SEVERITY, "rule", details, call.ended_at)
        await raise_signals(
            session,
            [raised],
            organization_id=call.organization_id,
            call_id=call.id,
            flow_id=call.flow_id,
            publish=call.sends_events,
        )
    await session.flush()


def sentiment_job(calls: SignalledCalls) -> JobHandler:
    """The job handler, bound to the calls it may read and mark (registered by ``parley.calls.tasks``)."""

    async def handle(ctx: JobContext, payload: Payload) -> None:
        await classify_call(ctx, payload, calls)

    return handle
