"""A turn's write when the session changed while the engine ran (another process's turn, a voice
transport, the idle sweeper): the turn is refused with 409 and nothing of it is written, and what the
other writer wrote stays."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from parley.kit.db import Database, unit_of_work
from tests.live import serve_in_thread
from tests.sessions.conftest import Platform

Change = Callable[[], Awaitable[None]]


class Meanwhile:
    """An upstream whose answer waits for a change to the database made on the test's event loop: what
    another process would do while this turn's tool call is out."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.change: Change | None = None

    async def answer(self, request: Request) -> JSONResponse:
        if self.change is not None and self.loop is not None:
            change, self.change = self.change, None
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(change(), self.loop))
        return JSONResponse({"success": True, "order": {"project_status": "ready"}})


@pytest.fixture(scope="module")
def meanwhile() -> Iterator[tuple[Meanwhile, str]]:
    upstream = Meanwhile()
    with serve_in_thread(Starlette(routes=[Route("/order", upstream.answer)])) as url:
        yield upstream, url


FLOW: dict[str, Any] = {
    "language": "en",
    "variables": {"result": None},
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "q", "prompt": "What do you need?", "next": "call"},
        {
            "id": "call",
            "type": "tool",
            "tool": "upstream",
            "arguments": {},
            "result_variable": "result",
            "next": "tell",
        },
        {"id": "tell", "type": "say", "text": "It is {{ result.order.project_status }}.", "next": "ask"},
    ],
}


async def _started(platform: Platform, url: str) -> str:
    await platform.tool(
        {"name": "upstream", "type": "http", "config": {"method": "GET", "url": f"{url}/order"}}
    )
    flow_id = await platform.flow(FLOW)
    return str((await platform.start(flow_id))["id"])


async def _row(db_session: AsyncSession, session_id: str) -> dict[str, Any]:
    found = await db_session.execute(
        text("SELECT status, version, voiced, state FROM conversation_sessions WHERE id = :id"),
        {"id": session_id},
    )
    return dict(found.one()._mapping)


def _changing(database: Database, session_id: str, statement: str) -> Change:
    async def change() -> None:
        async with unit_of_work(database) as session:
            await session.execute(text(statement), {"id": session_id})

    return change


async def test_a_turn_whose_session_was_written_meanwhile_is_refused_and_the_other_write_stays(
    make_platform: Any, meanwhile: tuple[Meanwhile, str], database: Database, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    upstream, url = meanwhile
    session_id = await _started(platform, url)
    first = await platform.say(session_id, "my order")
    assert "It is ready." in first["reply"]
    before = await _row(db_session, session_id)

    upstream.loop = asyncio.get_running_loop()
    upstream.change = _changing(
        database,
        session_id,
        "UPDATE conversation_sessions SET voiced = true, version = version + 1 WHERE id = :id",
    )
    refused = await platform.post(f"/api/sessions/{session_id}/messages", {"text": "again"})
    assert refused.status_code == 409, refused.text
    assert "changed by another request" in refused.json()["detail"]

    after = await _row(db_session, session_id)
    assert after["version"] == before["version"] + 1  # the other write, and nothing of this turn
    assert bool(after["voiced"]) is True
    assert after["state"] == before["state"]

    # The caller sends it again and the conversation goes on from where it was.
    retried = await platform.say(session_id, "again")
    assert "It is ready." in retried["reply"] and retried["voiced"] is True
    assert [t["text"] for t in retried["transcript"] if t["speaker"] == "caller"] == ["my order", "again"]


async def test_a_turn_whose_session_ended_meanwhile_answers_that_it_ended(
    make_platform: Any, meanwhile: tuple[Meanwhile, str], database: Database, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform()
    upstream, url = meanwhile
    session_id = await _started(platform, url)

    upstream.loop = asyncio.get_running_loop()
    upstream.change = _changing(
        database,
        session_id,
        "UPDATE conversation_sessions SET status = 'ended', outcome = 'abandoned', "
        "end_reason = 'idle_timeout', version = version + 1 WHERE id = :id",
    )
    refused = await platform.post(f"/api/sessions/{session_id}/messages", {"text": "my order"})
    assert refused.status_code == 409, refused.text
    assert "has ended (idle_timeout)" in refused.json()["detail"]
    assert (await _row(db_session, session_id))["status"] == "ended"


async def test_a_turn_keeps_a_column_another_writer_changed_without_a_new_version(
    make_platform: Any, meanwhile: tuple[Meanwhile, str], database: Database, db_session: AsyncSession
) -> None:
    # A voice transport marks the session connected with a plain UPDATE that leaves the version alone
    # (service.mark_voice_connected), so a turn in flight is not refused: the turn writes only its own
    # columns and answers with the row as it is now.
    platform: Platform = await make_platform()
    upstream, url = meanwhile
    session_id = await _started(platform, url)

    upstream.loop = asyncio.get_running_loop()
    upstream.change = _changing(
        database, session_id, "UPDATE conversation_sessions SET voiced = true WHERE id = :id"
    )
    turn = await platform.say(session_id, "my order")
    assert "It is ready." in turn["reply"]
    assert turn["voiced"] is True
    row = await _row(db_session, session_id)
    assert bool(row["voiced"]) is True and row["status"] == "active"
