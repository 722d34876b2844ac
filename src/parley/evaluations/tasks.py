"""The run job: one job per chunk of a run's scenarios, each scenario in short transactions of its own.

Idempotent and recoverable: only ``pending`` results run, a result is written only while it is still
``pending`` (a cancel in between wins), and a run left ``queued``/``running`` by a stopped process is
picked up again by the recovery query. Whichever chunk sees no pending scenario left completes the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.identity import system_context, user_context
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.evaluations import service
from parley.evaluations.models import EvaluationResult, EvaluationRun
from parley.evaluations.runner import MockedLine, MockedTools, Outcome, VoiceKit, run_scenario
from parley.evaluations.schemas import Scenario
from parley.flows.definition import FlowDefinition
from parley.flows.models import Flow, FlowVersion
from parley.kit.db import utcnow
from parley.kit.jobs import JobContext, registry
from parley.llm.models import LLMUsage
from parley.providers.service import find_config
from parley.runtime.adapters import PlatformKnowledge, PlatformLlm, PlatformTools
from parley.runtime.engine import FlowEngine
from parley.voice.engines import sphinx_host
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt
from parley.voice.engines.vad import WebRtcVad

log = structlog.get_logger("parley.evaluations")

SCENARIO_TIMEOUT_SECONDS = 120.0


async def _recover(session: AsyncSession) -> list[dict[str, Any]]:
    rows = await session.execute(
        select(EvaluationResult.run_id, EvaluationResult.chunk)
        .join(EvaluationRun, EvaluationRun.id == EvaluationResult.run_id)
        .where(EvaluationRun.status.in_(("queued", "running")), EvaluationResult.status == "pending")
        .distinct()
    )
    return [{"run_id": str(r.run_id), "chunk": int(r.chunk)} for r in rows]


async def _definition(session: AsyncSession, run: EvaluationRun) -> FlowDefinition | str:
    """The definition the run tests, or why it is gone (read per scenario: a flow may be deleted mid-run)."""
    flow = await session.get(Flow, run.flow_id)
    if flow is None or flow.organization_id != run.organization_id:
        return "The flow was deleted during the run."
    raw = flow.definition
    if run.flow_version is not None:
        version = await session.scalar(
            select(FlowVersion).where(FlowVersion.flow_id == flow.id, FlowVersion.version == run.flow_version)
        )
        if version is None:
            return f"Version {run.flow_version} of the flow no longer exists."
        raw = version.definition
    try:
        return FlowDefinition.model_validate(raw)
    except ValidationError:
        return "The flow's definition is no longer valid."


def _context(run: EvaluationRun) -> OrgContext:
    # The run acts for whoever started it (LLM usage rows name them), with a member's rights.
    if run.created_by:
        return user_context(run.organization_id, Role.member, user_id=run.created_by)
    return system_context(run.organization_id, actor="evaluation", name="Evaluation run")


def _voice_kit(context: JobContext, definition: FlowDefinition, run: EvaluationRun) -> VoiceKit:
    """The offline engines (PocketSphinx, eSpeak NG, WebRTC VAD): the caller's voice is always the
    offline one; models for other languages than US English come from ``<data dir>/models``."""
    return VoiceKit(
        definition=definition,
        stt=PocketsphinxStt(models_dir=context.settings.data_dir / "models"),
        caller_tts=EspeakTts(),
        agent_tts=EspeakTts(),
        vad=WebRtcVad(16000),
        pace="realtime" if (run.summary or {}).get("pace") == "realtime" else "fast",
        languages=frozenset({"en", "de"}) if sphinx_host.hosts() is not None else frozenset({"en"}),
    )


async def _run_one(
    context: JobContext, run: EvaluationRun, result: EvaluationResult
) -> tuple[Outcome, list[LLMUsage]]:
    async with context.unit(write=False) as session:
        status = await session.scalar(select(EvaluationRun.status).where(EvaluationRun.id == run.id))
        if status not in ("queued", "running"):
            return Outcome("skipped", service.CANCELLED), []
        definition = await _definition(session, run)
        if isinstance(definition, str):
            return Outcome("error", definition), []
        try:
            scenario = Scenario.model_validate(result.scenario)
        except ValidationError as exc:
            return Outcome("error", f"Not a valid scenario: {exc.errors()[0]['msg']}"), []
        org = _context(run)
        has_llm = await find_config(session, org, "openai") is not None
    # The scenario runs with no connection held: tools, knowledge and the model read through short
    # reads of their own (kit.db.short_read), so a slow tool holds no transaction.
    async with context.unit(write=False) as session:
        llm = PlatformLlm(session, context.settings, org) if has_llm else None
        engine = FlowEngine(
            definition,
            tools=MockedTools(PlatformTools(session, context.settings, run.organization_id), scenario.mocks),
            knowledge=PlatformKnowledge(session, run.organization_id),
            llm=llm if any(n.type in ("llm", "knowledge") for n in definition.nodes) else None,
            calls=MockedLine(scenario.line),
        )
        voice = _voice_kit(context, definition, run) if run.mode == "voice" else None
        try:
            outcome = await asyncio.wait_for(
                run_scenario(engine, scenario, session_id=f"eval_{result.id}", llm=llm, voice=voice),
                SCENARIO_TIMEOUT_SECONDS,
            )
        except TimeoutError:
            outcome = Outcome(
                "error", f"The scenario did not finish within {SCENARIO_TIMEOUT_SECONDS:.0f} s."
            )
        usage = list(llm.usage_rows) if llm is not None else []
        for row in usage:
            row.source = "evaluation"
        return outcome, usage


async def _save(context: JobContext, result_id: str, outcome: Outcome, usage: list[LLMUsage]) -> None:
    async with context.unit() as session:
        written = await session.execute(
            update(EvaluationResult)
            .where(EvaluationResult.id == result_id, EvaluationResult.status == "pending")
            .values(**outcome.fields(), finished_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if getattr(written, "rowcount", 0):
            session.add_all(usage)  # the model's tokens are real cost, also in a test


@registry.handler(service.RUN_JOB, recover=_recover)
async def run_chunk(context: JobContext, payload: dict[str, Any]) -> None:
    run_id, chunk = str(payload["run_id"]), int(payload["chunk"])
    async with context.unit() as session:
        run = await session.get(EvaluationRun, run_id)
        if run is None or run.status not in ("queued", "running"):
            return
        if run.status == "queued":
            await session.execute(
                update(EvaluationRun)
                .where(EvaluationRun.id == run_id, EvaluationRun.status == "queued")
                .values(status="running", started_at=utcnow())
                .execution_options(synchronize_session=False)
            )
        pending = list(
            await session.scalars(
                select(EvaluationResult)
                .where(
                    EvaluationResult.run_id == run_id,
                    EvaluationResult.chunk == chunk,
                    EvaluationResult.status == "pending",
                )
                .order_by(EvaluationResult.position)
            )
        )
    for result in pending:
        try:
            outcome, usage = await _run_one(context, run, result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an outage must not leave the scenario pending forever
            log.error(
                "evaluation_scenario_failed", run_id=run_id, error_type=type(exc).__name__, exc_info=exc
            )
            outcome, usage = (
                Outcome("error", f"The scenario could not run ({type(exc).__name__}: {exc})"[:500]),
                [],
            )
        await _save(context, result.id, outcome, usage)
    async with context.unit() as session:
        if await service.finish_if_done(session, run_id):
            log.info("evaluation_run_completed", run_id=run_id)
