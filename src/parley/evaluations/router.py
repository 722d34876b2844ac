"""/api/evaluations: test suites, runs of a suite against a flow, their results and comparisons."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path, Query, Request

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.evaluations import service
from parley.evaluations.models import EvaluationResult, EvaluationRun
from parley.evaluations.schemas import (
    ResultOut,
    RunComparison,
    RunCreate,
    RunOut,
    SuiteIn,
    SuiteOut,
)
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import BadRequest, documented
from parley.kit.jobs import enqueue_after_commit
from parley.kit.pagination import Page, Pagination, encode_cursor, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/evaluations", tags=["Evaluations"])

_REF = "#/components/schemas/{}"
# 422 is either a sentence (an invalid scenario, an empty suite) or FastAPI's field errors.
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "Invalid fields, or a request the suite or flow cannot serve (see detail).",
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": _REF.format("ErrorBody")},
                        {"$ref": _REF.format("HTTPValidationError")},
                    ]
                }
            }
        },
    }
}

DatasetId = Annotated[str, Path(alias="datasetId", max_length=40, description="Dataset id (ds_...).")]
RunId = Annotated[str, Path(alias="runId", max_length=40, description="Evaluation run id (evr_...).")]
OtherRunId = Annotated[str, Path(alias="otherRunId", max_length=40, description="The run to compare with.")]


@router.get("/suites", summary="List Evaluation Suites", response_model=list[SuiteOut])
async def list_suites(
    session: DbSession,
    context: OrgReader,
    name: Annotated[str | None, Query(max_length=200, description="Only the suite with this name.")] = None,
) -> list[SuiteOut]:
    return await service.list_suites(session, context.organization_id, name)


@router.get("/suites/{datasetId}", summary="Get Evaluation Suite", response_model=SuiteOut)
async def get_suite(session: DbSession, context: OrgReader, dataset_id: DatasetId) -> SuiteOut:
    return await service.suite_out(session, context.organization_id, dataset_id)


@router.put(
    "/suites/{datasetId}",
    summary="Put Evaluation Suite",
    response_model=SuiteOut,
    responses=UNPROCESSABLE,
)
async def put_suite(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    dataset_id: DatasetId,
    data: Annotated[SuiteIn, ParsedBody(SuiteIn)],
) -> SuiteOut:
    """Make the dataset a test suite: its items must be scenarios (checked now and on every write),
    their tool and node names checked against ``flow_id`` when given. With ``required_for_publish``
    the flow publishes only after a passing run of this suite on its draft."""
    out = await service.put_suite(session, context.organization_id, dataset_id, data)
    describe(request, "evaluation_suite", out.dataset_id, flow_id=out.flow_id, gate=out.required_for_publish)
    return out


@router.delete("/suites/{datasetId}", summary="Delete Evaluation Suite", response_model=DeletedOut)
async def delete_suite(
    request: Request, session: DbSession, context: OrgWriter, dataset_id: DatasetId
) -> DeletedOut:
    """The dataset stays, as a plain dataset; its runs stay too."""
    dataset_id = await service.delete_suite(session, context.organization_id, dataset_id)
    describe(request, "evaluation_suite", dataset_id)
    return DeletedOut(id=dataset_id)


@router.post(
    "/runs",
    summary="Create Evaluation Run",
    response_model=RunOut,
    responses={**documented(404, 409), **UNPROCESSABLE},
)
async def create_run(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[RunCreate, ParsedBody(RunCreate)],
) -> RunOut:
    """Run a suite against the flow's draft (or a published ``version``) in the background; poll
    ``GET /api/evaluations/runs/{runId}`` for progress. Tools run for real unless a scenario mocks
    them; no call record, signal, notification or telephony comes of a run."""
    run = await service.create_run(session, context, data)
    for chunk in range(run.chunks):
        enqueue_after_commit(session, request.app.state, service.RUN_JOB, {"run_id": run.id, "chunk": chunk})
    describe(request, "evaluation_run", run.id, suite=run.dataset_id, flow_id=run.flow_id)
    return (await service.runs_out(session, [run]))[0]


@router.get("/runs", summary="List Evaluation Runs", response_model=Page[RunOut])
async def list_runs(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    flow_id: Annotated[str | None, Query(max_length=40)] = None,
    suite: Annotated[str | None, Query(max_length=40, description="The suite's dataset id.")] = None,
) -> Page[RunOut]:
    stmt = service.runs_query(context.organization_id, flow_id, suite)
    rows, cursor = await paginate(session, stmt, EvaluationRun.id, page)
    return Page[RunOut](items=await service.runs_out(session, rows), next_cursor=cursor)


@router.get("/runs/{runId}", summary="Get Evaluation Run", response_model=RunOut)
async def get_run(session: DbSession, context: OrgReader, run_id: RunId) -> RunOut:
    run = await service.get_run(session, context.organization_id, run_id)
    return (await service.runs_out(session, [run]))[0]


@router.get("/runs/{runId}/results", summary="List Evaluation Run Results", response_model=Page[ResultOut])
async def list_results(
    session: DbSession,
    context: OrgReader,
    run_id: RunId,
    page: Pagination,
    status: Annotated[
        Literal["pending", "passed", "failed", "skipped", "error"] | None,
        Query(description="Only this status."),
    ] = None,
) -> Page[ResultOut]:
    """The run's scenarios in suite order, with every failed expectation, the transcript, the tool
    calls and the time of each turn."""
    run = await service.get_run(session, context.organization_id, run_id)
    stmt = service.results_query(context.organization_id, run.id, status)
    if page.after_id is not None:
        try:
            after = int(page.after_id)
        except ValueError as exc:
            raise BadRequest("The cursor is not valid; pass the next_cursor of a previous page.") from exc
        stmt = stmt.where(EvaluationResult.position > after)
    rows = list((await session.scalars(stmt.order_by(EvaluationResult.position).limit(page.limit + 1))).all())
    cursor = None
    if len(rows) > page.limit:
        rows = rows[: page.limit]
        cursor = encode_cursor(str(rows[-1].position))
    return Page[ResultOut](items=[ResultOut.model_validate(r) for r in rows], next_cursor=cursor)


@router.post(
    "/runs/{runId}/cancel", summary="Cancel Evaluation Run", response_model=RunOut, responses=documented(409)
)
async def cancel_run(request: Request, session: DbSession, context: OrgWriter, run_id: RunId) -> RunOut:
    """Scenarios not yet run are reported as skipped; a scenario running right now is not kept."""
    run = await service.cancel_run(session, context.organization_id, run_id)
    describe(request, "evaluation_run", run.id, cancelled=True)
    return (await service.runs_out(session, [run]))[0]


@router.get(
    "/runs/{runId}/compare/{otherRunId}", summary="Compare Evaluation Runs", response_model=RunComparison
)
async def compare_runs(
    session: DbSession, context: OrgReader, run_id: RunId, other_run_id: OtherRunId
) -> RunComparison:
    """Which scenarios changed status from ``runId`` (before) to ``otherRunId`` (after)."""
    return await service.compare(session, context.organization_id, run_id, other_run_id)
