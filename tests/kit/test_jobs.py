"""The in-process job runner: enqueue after commit only, recovery on start-up, failures contained."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from parley.kit.db import Database
from parley.kit.jobs import JobContext, JobRegistry, JobRunner, enqueue_after_commit
from parley.knowledge.models import KnowledgeDocument
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org


def _runner(database: Database, jobs: JobRegistry, app: Any) -> JobRunner:
    return JobRunner(JobContext(db=database, state=app.state), jobs=jobs, workers=2)


async def test_jobs_run_and_failures_do_not_stop_the_workers(database: Database, app: Any) -> None:
    jobs = JobRegistry()
    seen: list[int] = []

    @jobs.handler("record")
    async def record(context: JobContext, payload: dict[str, Any]) -> None:
        if payload["n"] == 2:
            raise RuntimeError("boom")
        seen.append(payload["n"])

    runner = _runner(database, jobs, app)
    for n in range(5):
        runner.enqueue("record", {"n": n})
    await runner.drain()
    assert sorted(seen) == [0, 1, 3, 4]
    runner.enqueue("record", {"n": 5})
    await runner.drain()
    assert 5 in seen
    await runner.stop()
    assert not runner.started
    with pytest.raises(KeyError):
        runner.enqueue("unknown", {})


async def test_enqueue_happens_only_after_a_commit(database: Database, app: Any) -> None:
    jobs = JobRegistry()
    seen: list[str] = []

    @jobs.handler("note")
    async def note(context: JobContext, payload: dict[str, Any]) -> None:
        seen.append(payload["what"])

    runner = _runner(database, jobs, app)
    app.state.jobs = runner
    try:
        async with database.sessionmaker() as session:
            enqueue_after_commit(session, app.state, "note", {"what": "committed"})
            await session.commit()
            for callback in session.info.pop("after_commit", []):  # what the request dependency does
                await callback()
        async with database.sessionmaker() as session:
            enqueue_after_commit(session, app.state, "note", {"what": "rolled back"})
            await session.rollback()  # the request failed: its callbacks are never run
        await runner.drain()
        assert seen == ["committed"]
    finally:
        await runner.stop()


async def test_registry_refuses_two_handlers_for_one_name() -> None:
    jobs = JobRegistry()

    async def one(context: JobContext, payload: dict[str, Any]) -> None: ...

    async def two(context: JobContext, payload: dict[str, Any]) -> None: ...

    jobs.register("job", one)
    jobs.register("job", one)  # the same handler again is fine (re-imports)
    with pytest.raises(ValueError, match="already registered"):
        jobs.register("job", two)


async def test_start_up_recovers_pending_documents(
    client: httpx.AsyncClient, app: Any, db_session: AsyncSession
) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    # A document whose job was lost (the process stopped before it ran): only the row remembers it.
    db_session.add(
        KnowledgeDocument(
            id="doc_01JRECOVERED0000000000000",
            organization_id=org["id"],
            title="Left behind",
            status="pending",
            source="text",
            content_type="text/plain",
            size_bytes=24,
            chunk_count=0,
            text="Recovered after restart.",
        )
    )
    await db_session.commit()
    async with app.router.lifespan_context(app):
        await app.state.jobs.drain()
        response = await client.get("/api/knowledge/documents/doc_01JRECOVERED0000000000000", headers=headers)
    assert response.json()["status"] == "ready"
    assert response.json()["chunk_count"] == 1
    assert not app.state.jobs.started


async def test_stop_drops_queued_jobs_which_recovery_brings_back(database: Database, app: Any) -> None:
    jobs = JobRegistry()
    seen: list[int] = []

    @jobs.handler("slow")
    async def slow(context: JobContext, payload: dict[str, Any]) -> None:
        seen.append(payload["n"])

    runner = _runner(database, jobs, app)
    for n in range(10):
        runner.enqueue("slow", {"n": n})
    await runner.stop()  # nothing ran yet: the workers had no chance to take a job
    assert seen == []
    await runner.drain()  # nothing left to wait for
