"""A request that waits for one of its organization's turn slots gives back authentication's connection
while it waits; what authentication registered (the audit event) must still commit with the request's
own work, exactly as when no wait happens: described by the handler, and not kept when it fails."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from parley.sessions import locks
from tests.sessions.conftest import Platform
from tests.sessions.test_router import ECHO


async def _audit(db_session: AsyncSession, path: str) -> list[dict[str, Any]]:
    found = await db_session.execute(
        text("SELECT action, resource_type, resource_id FROM audit_events WHERE path = :path"),
        {"path": path},
    )
    return [dict(row._mapping) for row in found]


async def _while_the_slot_is_taken(
    platform: Platform, *requests: tuple[str, dict[str, Any]]
) -> list[httpx.Response]:
    """Send ``requests`` while the organization's only slot is held here, and let them go on once all
    of them wait for it (each has authenticated and given its connection back by then)."""
    slots = locks._slots(platform.app, platform.org)
    async with locks.turn_slot(platform.app, platform.org):
        sent = [asyncio.create_task(platform.post(path, body)) for path, body in requests]
        while len(getattr(slots, "_waiters", None) or ()) < len(requests):
            assert not any(task.done() for task in sent), [task.result().text for task in sent if task.done()]
            await asyncio.sleep(0.01)
    return list(await asyncio.gather(*sent))


async def test_turns_that_waited_for_a_slot_commit_their_audit_event_with_their_work(
    make_platform: Any, db_session: AsyncSession
) -> None:
    platform: Platform = await make_platform(turn_slots_per_organization=1)
    flow_id = await platform.flow(ECHO)
    session_id = str((await platform.start(flow_id))["id"])
    turn_path = f"/api/sessions/{session_id}/messages"
    unknown_path = "/api/sessions/ses_unknown00000000000000000/messages"

    opening, turn, unknown = await _while_the_slot_is_taken(
        platform,
        ("/api/sessions", {"flow_id": flow_id}),
        (turn_path, {"text": "hello"}),
        (unknown_path, {"text": "hello"}),
    )

    assert opening.status_code == 200, opening.text
    assert turn.status_code == 200, turn.text
    assert turn.json()["reply"].startswith("Echo hello.")
    assert unknown.status_code == 404, unknown.text
    # Described by the handlers, as without a wait (the event is written when the work commits).
    assert await _audit(db_session, turn_path) == [
        {"action": "send_session_message", "resource_type": "session", "resource_id": session_id}
    ]
    opened = [
        e for e in await _audit(db_session, "/api/sessions") if e["resource_id"] == opening.json()["id"]
    ]
    assert opened == [
        {"action": "create_session", "resource_type": "session", "resource_id": opening.json()["id"]}
    ]
    # A failed request keeps nothing, its audit event included.
    assert await _audit(db_session, unknown_path) == []
