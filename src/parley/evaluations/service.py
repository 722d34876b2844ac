"""Suites, runs and the publish gate. Never commits; the run's work happens in :mod:`tasks`."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import ValidationError
from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.datasets import service as datasets
from parley.datasets.models import Dataset, DatasetItem
from parley.evaluations.models import EvaluationResult, EvaluationRun, EvaluationSuite
from parley.evaluations.scenarios import parse_items
from parley.evaluations.schemas import (
    MAX_SUITE_SCENARIOS,
    RunComparison,
    RunCounts,
    RunCreate,
    RunOut,
    ScenarioChange,
    SuiteIn,
    SuiteOut,
)
from parley.flows import service as flows
from parley.flows.definition import FlowDefinition
from parley.flows.models import Flow, FlowVersion
from parley.kit.db import utcnow
from parley.kit.errors import Conflict, NotFound, Unprocessable
from parley.kit.ids import new_id
from parley.kit.tenancy import get_owned, scoped

RUN_JOB = "evaluations.run_chunk"
RUN_PARALLELISM = 4  # chunks (jobs) per run; the queue's workers bound how many run at once
CANCELLED = "The run was cancelled before this scenario ran."


class GateFailed(Conflict):
    code = "evaluation_gate"


# --- suites --------------------------------------------------------------------------------------


def _definition(raw: dict[str, Any]) -> FlowDefinition | None:
    try:
        return FlowDefinition.model_validate(raw)
    except ValidationError:
        return None


async def _suite_flow(
    session: AsyncSession, organization_id: str, flow_id: str | None
) -> FlowDefinition | None:
    if flow_id is None:
        return None
    flow = await session.scalar(scoped(Flow, organization_id).where(Flow.id == flow_id))
    return None if flow is None else _definition(flow.definition)


def _problems_text(problems: list[tuple[int, str]], total: int) -> str:
    shown = "; ".join(f"item {index + 1}: {message}" for index, message in problems[:20])
    more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
    return f"{len(problems)} of {total} item(s) are not valid scenarios: {shown}{more}"


async def check_suite_items(
    session: AsyncSession, dataset: Dataset, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The datasets hook: a suite's items must be scenarios (normalized on the way in)."""
    suite = await session.get(EvaluationSuite, dataset.id)
    if suite is None:
        return items
    count = await session.scalar(select(func.count()).where(DatasetItem.dataset_id == dataset.id)) or 0
    if count + len(items) > MAX_SUITE_SCENARIOS:
        raise Unprocessable(
            f"A test suite holds at most {MAX_SUITE_SCENARIOS} scenarios; it has {count} and "
            f"{len(items)} more were sent. Split it into several suites."
        )
    definition = await _suite_flow(session, dataset.organization_id, suite.flow_id)
    normalized, problems = parse_items(items, definition)
    if problems:
        pairs = [(p.index, p.message) for p in problems]
        raise datasets.InvalidItems(_problems_text(pairs, len(items)), pairs)
    return normalized


datasets.item_checks.append(check_suite_items)


async def _suite_out(session: AsyncSession, suite: EvaluationSuite, dataset: Dataset) -> SuiteOut:
    count = await session.scalar(select(func.count()).where(DatasetItem.dataset_id == dataset.id)) or 0
    return SuiteOut(
        dataset_id=dataset.id,
        name=dataset.name,
        flow_id=suite.flow_id,
        required_for_publish=suite.required_for_publish,
        scenario_count=count,
        created_at=suite.created_at,
        updated_at=suite.updated_at,
    )


async def get_suite(
    session: AsyncSession, organization_id: str, dataset_id: str
) -> tuple[EvaluationSuite, Dataset]:
    dataset = await datasets.get_dataset(session, organization_id, dataset_id)
    suite = await session.get(EvaluationSuite, dataset.id)
    if suite is None:
        raise NotFound(
            f"Dataset {dataset_id!r} is not a test suite (PUT /api/evaluations/suites/{dataset_id})."
        )
    return suite, dataset


async def suite_out(session: AsyncSession, organization_id: str, dataset_id: str) -> SuiteOut:
    suite, dataset = await get_suite(session, organization_id, dataset_id)
    return await _suite_out(session, suite, dataset)


async def list_suites(session: AsyncSession, organization_id: str, name: str | None) -> list[SuiteOut]:
    stmt = (
        select(EvaluationSuite, Dataset)
        .join(Dataset, Dataset.id == EvaluationSuite.dataset_id)
        .where(EvaluationSuite.organization_id == organization_id)
        .order_by(Dataset.name)
    )
    if name is not None:
        stmt = stmt.where(Dataset.name == name)
    rows = (await session.execute(stmt)).all()
    return [await _suite_out(session, suite, dataset) for suite, dataset in rows]


async def put_suite(session: AsyncSession, organization_id: str, dataset_id: str, data: SuiteIn) -> SuiteOut:
    """Make a dataset a test suite (or change its flow): every item must then be a valid scenario."""
    dataset = await datasets.get_dataset(session, organization_id, dataset_id)
    definition: FlowDefinition | None = None
    if data.flow_id is not None:
        flow = await get_owned(session, Flow, data.flow_id, organization_id, "Flow")
        definition = _definition(flow.definition)
    elif data.required_for_publish:
        raise Unprocessable("A suite required for publishing names its flow (flow_id).")
    items = list(
        await session.scalars(
            select(DatasetItem).where(DatasetItem.dataset_id == dataset.id).order_by(DatasetItem.id)
        )
    )
    if len(items) > MAX_SUITE_SCENARIOS:
        raise Unprocessable(
            f"A test suite holds at most {MAX_SUITE_SCENARIOS} scenarios; this dataset has {len(items)}."
        )
    normalized, problems = parse_items([item.data for item in items], definition)
    if problems:
        pairs = [(p.index, f"({items[p.index].id}) {p.message}") for p in problems]
        raise datasets.InvalidItems(_problems_text(pairs, len(items)), pairs)
    for item, data_out in zip(items, normalized, strict=True):
        if item.data != data_out:
            item.data = data_out
    suite = await session.get(EvaluationSuite, dataset.id)
    if suite is None:
        suite = EvaluationSuite(dataset_id=dataset.id, organization_id=organization_id)
        session.add(suite)
    suite.flow_id = data.flow_id
    suite.required_for_publish = data.required_for_publish
    suite.updated_at = utcnow()
    await session.flush()
    return await _suite_out(session, suite, dataset)


async def delete_suite(session: AsyncSession, organization_id: str, dataset_id: str) -> str:
    suite, dataset = await get_suite(session, organization_id, dataset_id)
    await session.delete(suite)
    await session.flush()
    return dataset.id


# --- runs ----------------------------------------------------------------------------------------


def suite_hash(items: list[DatasetItem]) -> str:
    digest = hashlib.sha256()
    for item in sorted(items, key=lambda i: i.id):
        digest.update(item.id.encode())
        digest.update(orjson.dumps(item.data, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


async def _suite_by_ref(session: AsyncSession, organization_id: str, ref: str) -> Dataset:
    dataset = await session.scalar(
        scoped(Dataset, organization_id).where((Dataset.id == ref) | (Dataset.name == ref)).limit(1)
    )
    if dataset is None:
        raise NotFound(f"No dataset with the id or name {ref!r} in this organization.")
    if await session.get(EvaluationSuite, dataset.id) is None:
        raise Unprocessable(
            f"Dataset {dataset.name!r} is not a test suite; make it one with PUT /api/evaluations/suites/{dataset.id}."
        )
    return dataset


async def _items(session: AsyncSession, dataset_id: str) -> list[DatasetItem]:
    return list(
        await session.scalars(
            select(DatasetItem).where(DatasetItem.dataset_id == dataset_id).order_by(DatasetItem.id)
        )
    )


async def create_run(session: AsyncSession, context: OrgContext, data: RunCreate) -> EvaluationRun:
    org = context.organization_id
    dataset = await _suite_by_ref(session, org, data.suite)
    flow = await get_owned(session, Flow, data.flow_id, org, "Flow")
    if data.version is not None:
        version = await session.scalar(
            scoped(FlowVersion, org).where(
                FlowVersion.flow_id == flow.id, FlowVersion.version == data.version
            )
        )
        if version is None:
            raise NotFound(f"Flow {flow.id!r} has no published version {data.version}.")
        raw, digest = version.definition, version.definition_hash
    else:
        raw, digest = flow.definition, flow.definition_hash
    definition = _definition(raw)
    if definition is None:
        raise Conflict("The flow's definition is not valid; fix it before running a suite against it.")
    items = await _items(session, dataset.id)
    if not items:
        raise Unprocessable(f"The suite {dataset.name!r} has no scenarios yet.")
    chunks = min(RUN_PARALLELISM, len(items))
    run = EvaluationRun(
        id=new_id("evr"),
        organization_id=org,
        dataset_id=dataset.id,
        suite_name=dataset.name,
        suite_hash=suite_hash(items),
        flow_id=flow.id,
        flow_name=flow.name,
        flow_version=data.version,
        definition_hash=digest,
        mode=data.mode,
        status="queued",
        total=len(items),
        chunks=chunks,
        # voice mode's pace is kept in the summary (and stays there when the run is summarized)
        summary={"pace": pace_of(data)} if data.mode == "voice" else {},
        created_by=context.principal.id,
    )
    session.add(run)
    await session.flush()  # the results refer to it
    _, problems = parse_items([item.data for item in items], definition)
    invalid = {p.index: p.message for p in problems}
    now = utcnow()
    for position, item in enumerate(items):
        name = str(item.data.get("name") or item.data.get("scenario") or item.id)[:200]
        row = EvaluationResult(
            id=new_id("evres"),
            organization_id=org,
            run_id=run.id,
            item_id=item.id,
            position=position,
            chunk=position % chunks,
            name=name,
            scenario=item.data,
            status="pending",
        )
        if position in invalid:  # valid for the suite's flow, not for this one: accounted for, not run
            row.status, row.reason, row.finished_at = (
                "error",
                f"Not a valid scenario for this flow: {invalid[position]}",
                now,
            )
        session.add(row)
    await session.flush()
    return run


async def get_run(session: AsyncSession, organization_id: str, run_id: str) -> EvaluationRun:
    return await get_owned(session, EvaluationRun, run_id, organization_id, "Evaluation run")


async def counts(session: AsyncSession, run_ids: list[str]) -> dict[str, RunCounts]:
    found: dict[str, RunCounts] = {run_id: RunCounts() for run_id in run_ids}
    if not run_ids:
        return found
    rows = await session.execute(
        select(EvaluationResult.run_id, EvaluationResult.status, func.count())
        .where(EvaluationResult.run_id.in_(run_ids))
        .group_by(EvaluationResult.run_id, EvaluationResult.status)
    )
    for run_id, status, number in rows:
        setattr(found[str(run_id)], str(status), int(number))
    return found


def run_out(run: EvaluationRun, tally: RunCounts) -> RunOut:
    return RunOut(
        id=run.id,
        dataset_id=run.dataset_id,
        suite_name=run.suite_name,
        flow_id=run.flow_id,
        flow_name=run.flow_name,
        flow_version=run.flow_version,
        definition_hash=run.definition_hash,
        mode=run.mode,
        status=run.status,
        passed=run.passed,
        total=run.total,
        done=run.total - tally.pending,
        counts=tally,
        summary=run.summary or {},
        created_by=run.created_by,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )


async def runs_out(session: AsyncSession, runs: list[EvaluationRun]) -> list[RunOut]:
    tallies = await counts(session, [r.id for r in runs])
    return [run_out(r, tallies[r.id]) for r in runs]


def runs_query(organization_id: str, flow_id: str | None, dataset_id: str | None) -> Select[EvaluationRun]:
    stmt = scoped(EvaluationRun, organization_id)
    if flow_id is not None:
        stmt = stmt.where(EvaluationRun.flow_id == flow_id)
    if dataset_id is not None:
        stmt = stmt.where(EvaluationRun.dataset_id == dataset_id)
    return stmt


def results_query(organization_id: str, run_id: str, status: str | None) -> Select[EvaluationResult]:
    stmt = scoped(EvaluationResult, organization_id).where(EvaluationResult.run_id == run_id)
    if status is not None:
        stmt = stmt.where(EvaluationResult.status == status)
    return stmt


def pace_of(data: RunCreate) -> str:
    """Voice mode's pace: ``fast`` unless the run asks for ``realtime``."""
    return data.voice.pace if data.voice is not None else "fast"


async def summarize(session: AsyncSession, run: EvaluationRun) -> tuple[dict[str, Any], bool]:
    """The summary of a finished run and whether it passed (every scenario passed)."""
    tally = (await counts(session, [run.id]))[run.id]
    rows = await session.execute(
        select(EvaluationResult.turns, EvaluationResult.duration_ms).where(EvaluationResult.run_id == run.id)
    )
    turn_ms: list[float] = []
    durations: list[float] = []
    accuracy: list[float] = []
    voice_ms: list[float] = []
    interruptions = false_interruptions = 0
    for turns, duration in rows:
        turn_ms.extend(float(t.get("total_ms") or 0.0) for t in turns or [])
        for turn in turns or []:
            voice = turn.get("voice") or {}
            if voice.get("recognition_accuracy") is not None:
                accuracy.append(float(voice["recognition_accuracy"]))
            if voice.get("voice_to_voice_ms") is not None:
                voice_ms.append(float(voice["voice_to_voice_ms"]))
            barge = voice.get("barge_in") or {}
            interruptions += bool(barge.get("agent_interrupted"))
            false_interruptions += bool(barge.get("false_interruption"))
        if duration is not None:
            durations.append(float(duration))

    def quantile(values: list[float], q: float) -> float | None:
        if not values:
            return None
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    summary = {
        **tally.model_dump(),
        "pass_rate": round(tally.passed / run.total, 4) if run.total else None,
        "turns": len(turn_ms),
        "turn_ms_p50": quantile(turn_ms, 0.5),
        "turn_ms_p95": quantile(turn_ms, 0.95),
        "scenario_ms_p50": quantile(durations, 0.5),
    }
    if run.mode == "voice":
        summary["pace"] = (run.summary or {}).get("pace", "fast")
        summary["interruptions"] = interruptions
        summary["false_interruptions"] = false_interruptions
        summary["recognition_accuracy_mean"] = round(sum(accuracy) / len(accuracy), 3) if accuracy else None
        summary["voice_to_voice_ms_p50"] = quantile(voice_ms, 0.5)
        summary["voice_to_voice_ms_p95"] = quantile(voice_ms, 0.95)
    return summary, tally.passed == run.total


async def finish_if_done(session: AsyncSession, run_id: str) -> bool:
    """Mark the run completed once no scenario is pending (idempotent; any chunk may call it)."""
    run = await session.get(EvaluationRun, run_id)
    if run is None or run.status not in ("queued", "running"):
        return False
    pending = await session.scalar(
        select(func.count()).where(EvaluationResult.run_id == run_id, EvaluationResult.status == "pending")
    )
    if pending:
        return False
    summary, passed = await summarize(session, run)
    done = await session.execute(
        update(EvaluationRun)
        .where(EvaluationRun.id == run_id, EvaluationRun.status.in_(("queued", "running")))
        .values(status="completed", passed=passed, summary=summary, finished_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(done, "rowcount", 0))


async def cancel_run(session: AsyncSession, organization_id: str, run_id: str) -> EvaluationRun:
    run = await get_run(session, organization_id, run_id)
    if run.status not in ("queued", "running"):
        raise Conflict(f"The run has already ended ({run.status}).")
    now = utcnow()
    await session.execute(
        update(EvaluationResult)
        .where(EvaluationResult.run_id == run.id, EvaluationResult.status == "pending")
        .values(status="skipped", reason=CANCELLED, finished_at=now)
        .execution_options(synchronize_session=False)
    )
    summary, _ = await summarize(session, run)
    run.status, run.passed, run.summary, run.finished_at = "cancelled", False, summary, now
    await session.flush()
    return run


async def compare(session: AsyncSession, organization_id: str, base_id: str, other_id: str) -> RunComparison:
    base = await get_run(session, organization_id, base_id)
    other = await get_run(session, organization_id, other_id)

    async def statuses(run_id: str) -> dict[str, tuple[str, str]]:
        rows = await session.execute(
            select(EvaluationResult.item_id, EvaluationResult.name, EvaluationResult.status).where(
                EvaluationResult.run_id == run_id
            )
        )
        return {str(r.item_id): (str(r.name), str(r.status)) for r in rows}

    before, after = await statuses(base.id), await statuses(other.id)
    changed: list[ScenarioChange] = []
    fixed = broken = 0
    for item_id in sorted(set(before) | set(after)):
        old, new = before.get(item_id), after.get(item_id)
        if old is not None and new is not None and old[1] == new[1]:
            continue
        name = (new or old or ("", ""))[0]
        changed.append(
            ScenarioChange(name=name, item_id=item_id, before=old and old[1], after=new and new[1])
        )
        if old and new and old[1] in ("failed", "error") and new[1] == "passed":
            fixed += 1
        if old and new and old[1] == "passed" and new[1] in ("failed", "error"):
            broken += 1
    base_out, other_out = await runs_out(session, [base, other])
    return RunComparison(base=base_out, other=other_out, changed=changed, fixed=fixed, broken=broken)


# --- the publish gate ----------------------------------------------------------------------------


async def publish_gate(session: AsyncSession, context: OrgContext, flow: Flow) -> None:
    """Publishing needs, for every suite required for this flow, a completed run on exactly this draft
    and this suite content that passed; else 409 naming what is missing or failing."""
    suites = list(
        await session.scalars(
            select(EvaluationSuite).where(
                EvaluationSuite.organization_id == context.organization_id,
                EvaluationSuite.flow_id == flow.id,
                EvaluationSuite.required_for_publish.is_(True),
            )
        )
    )
    for suite in suites:
        dataset = await session.get(Dataset, suite.dataset_id)
        if dataset is None:
            continue
        content = suite_hash(await _items(session, dataset.id))
        run = await session.scalar(
            select(EvaluationRun)
            .where(
                EvaluationRun.flow_id == flow.id,
                EvaluationRun.dataset_id == dataset.id,
                EvaluationRun.flow_version.is_(None),
                EvaluationRun.definition_hash == flow.definition_hash,
                EvaluationRun.suite_hash == content,
                EvaluationRun.status == "completed",
            )
            .order_by(EvaluationRun.finished_at.desc(), EvaluationRun.id.desc())
            .limit(1)
        )
        if run is None:
            raise GateFailed(
                f"Publishing this flow requires the suite {dataset.name!r} to pass on this draft, and it has "
                f"not run on it yet: POST /api/evaluations/runs with suite {dataset.id!r} and flow "
                f"{flow.id!r} (or `parley eval run {flow.id} --suite {dataset.name!r}`), then publish again."
            )
        if not run.passed:
            failing = list(
                await session.scalars(
                    select(EvaluationResult.name)
                    .where(EvaluationResult.run_id == run.id, EvaluationResult.status != "passed")
                    .order_by(EvaluationResult.position)
                )
            )
            shown = ", ".join(repr(n) for n in failing[:20]) + (" ..." if len(failing) > 20 else "")
            raise GateFailed(
                f"Publishing is refused: the suite {dataset.name!r} failed on this draft (run {run.id}); "
                f"{len(failing)} scenario(s) did not pass: {shown}."
            )


flows.publish_checks.append(publish_gate)
