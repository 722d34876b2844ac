"""Jobs about call records: the brain's sentiment classifier, handed what it may read and mark of a call,
and the post-call analysis (:mod:`parley.calls.analysis`)."""

from __future__ import annotations

import structlog
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.brain.sentiment import PROVIDER, SENTIMENT_JOB, provider_config
from parley.brain.tasks import sentiment_job
from parley.calls import analysis
from parley.calls.models import Call
from parley.calls.service import (
    ENDED_EVENT_GRACE_SECONDS,
    PUBLISH_ENDED_JOB,
    CallsForTheBrain,
    call_analyzed_data,
    publish_ended,
    sends_events,
    store_analysis,
)
from parley.kit.db import utcnow
from parley.kit.errors import ParleyError
from parley.kit.ids import new_id
from parley.kit.jobs import JobContext, Payload, registry, runner_for
from parley.llm.client import Completion
from parley.llm.models import LLMUsage
from parley.llm.service import ResolvedProvider, client_for
from parley.providers.catalog import OpenAIConfig
from parley.webhooks.service import publish_event

log = structlog.get_logger("parley.calls.analysis")

RECOVERY_LIMIT = 1000

registry.register(SENTIMENT_JOB, sentiment_job(CallsForTheBrain()))


async def _ask(ctx: JobContext, config: OpenAIConfig, payload: Payload) -> Completion:
    provider = ResolvedProvider(PROVIDER, config.base_url, config.api_key.get_secret_value(), config.model)
    client, http = client_for(ctx.settings, provider)
    async with http:
        return await client.complete(payload)


async def analyze(ctx: JobContext, payload: Payload) -> None:
    """Summarize one call and extract its flow's fields; store them and send ``call.analyzed``.

    Reads in one unit, asks the model with no transaction open, writes in a short unit. Idempotent: a
    call whose analysis is no longer pending is skipped."""
    call_id = str(payload.get("call_id") or "")
    async with ctx.unit(write=False) as session:
        call = await session.scalar(select(Call).where(Call.id == call_id))
        if call is None or call.analysis_status != "pending":
            return
        spec = await analysis.spec_of(session, call.organization_id, call.flow_id, call.flow_version)
        config = await provider_config(session, ctx.settings, call.organization_id) if spec else None
    organization_id = call.organization_id
    answer: analysis.ModelAnswer | None = None
    completion: Completion | None = None
    if spec is not None and config is not None:
        try:
            completion = await _ask(ctx, config, analysis.request_payload(config.model, spec, call))
        except ParleyError as exc:
            log.warning(
                "analysis_llm_failed", call_id=call_id, error_type=type(exc).__name__, reason=exc.detail
            )
        else:
            answer = analysis.parse_answer(completion.content, spec)
            if answer is None:
                log.warning("analysis_llm_unparsable", call_id=call_id)
    try:
        async with ctx.unit() as session:
            # Locked: a voice call's pending call.ended (publish_ended, which locks it too) and this
            # decide one after the other which of them sends call.analyzed.
            stored = await session.scalar(select(Call).where(Call.id == call_id).with_for_update())
            if stored is None or stored.analysis_status != "pending":
                return
            if completion is not None and config is not None:
                session.add(
                    LLMUsage(
                        id=new_id("llmu"),
                        organization_id=organization_id,
                        provider=PROVIDER,
                        model=(completion.model or config.model)[:120],
                        source=analysis.USAGE_SOURCE,
                        prompt_tokens=completion.usage.prompt_tokens,
                        completion_tokens=completion.usage.completion_tokens,
                        actor_id=None,
                    )
                )
            if spec is None:  # the flow or its analysis block is gone
                store_analysis(stored, summary=None, extracted={}, method="variables", status="failed")
            else:
                fallback = analysis.from_variables(spec, stored.variables)
                if answer is not None:
                    extracted = {**fallback, **answer.fields}
                    store_analysis(stored, summary=answer.summary, extracted=extracted, method="llm")
                else:
                    summary = analysis.digest(stored, fallback) if spec.summary else None
                    store_analysis(stored, summary=summary, extracted=fallback, method="variables")
            await session.flush()
            # Never for the console's test conversations; after call.ended: a voice call whose
            # call.ended still waits for the transport sends it then (calls.service.publish_ended).
            if sends_events(stored.channel) and not stored.ended_event_pending:
                await publish_event(session, organization_id, "call.analyzed", call_analyzed_data(stored))
    except SQLAlchemyError as exc:  # e.g. the organization was deleted meanwhile
        log.warning("analysis_store_failed", call_id=call_id, error_type=type(exc).__name__)
        return
    log.info("call_analyzed", call_id=call_id, method=stored.analysis_method, status=stored.analysis_status)


async def pending_analyses(session: AsyncSession) -> list[Payload]:
    """Calls whose analysis has not run (a restart, or no queue when they were stored)."""
    ids = await session.scalars(
        select(Call.id).where(Call.analysis_status == "pending").order_by(Call.id).limit(RECOVERY_LIMIT)
    )
    return [{"call_id": call_id} for call_id in ids]


registry.register(analysis.ANALYZE_JOB, analyze, recover=pending_analyses)


async def publish_ended_job(ctx: JobContext, payload: Payload) -> None:
    """A voice call's ``call.ended`` whose transport did not attach the voice facts within the grace
    (the process serving the call stopped, or storing them failed): send it with what the record holds.
    Early (a restart's recovery), it waits out the rest of the grace; done already, it does nothing."""
    call_id = str(payload.get("call_id") or "")
    async with ctx.unit() as session:
        call = await session.scalar(select(Call).where(Call.id == call_id).with_for_update())
        if call is None or not call.ended_event_pending:
            return
        waited = (utcnow() - call.ended_at).total_seconds()
        if waited < ENDED_EVENT_GRACE_SECONDS:
            runner_for(ctx.state).enqueue_later(
                PUBLISH_ENDED_JOB, {"call_id": call_id}, ENDED_EVENT_GRACE_SECONDS - waited
            )
            return
        await publish_ended(session, call)
    log.warning("call_ended_without_voice_facts", call_id=call_id)


async def pending_ended_events(session: AsyncSession) -> list[Payload]:
    """Voice calls whose ``call.ended`` is still waiting (a restart lost the delayed job)."""
    ids = await session.scalars(
        select(Call.id).where(Call.ended_event_pending.is_(True)).order_by(Call.id).limit(RECOVERY_LIMIT)
    )
    return [{"call_id": call_id} for call_id in ids]


registry.register(PUBLISH_ENDED_JOB, publish_ended_job, recover=pending_ended_events)
