"""The driver writers behind ``kit.db.commit_now`` (``kit.sqlite.InlineWriter``, ``kit.postgres.
PooledWriter``): a whole transaction committed, or nothing written and the caller told to write the
usual way. Real parts: a migrated database of the test's own (SQLite file and PostgreSQL), the
platform's ``Database``, a second connection holding SQLite's write lock."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, insert, text, update

from parley.audit.models import AuditEvent
from parley.kit.db import Database, unit_of_work
from tests import migrated

TABLE: Any = AuditEvent.__table__
INSERT = insert(TABLE)
RENAME = (
    update(TABLE)
    .where(TABLE.c.id == bindparam("event_id"))
    .values(action=bindparam("new_action"))
    .returning(TABLE.c.id, TABLE.c.action, TABLE.c.details, TABLE.c.created_at)
)
AT = datetime(2026, 11, 29, 3, 0, 1, 250_000, tzinfo=UTC)


def event(event_id: str, **changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": event_id,
        "organization_id": "org_writer",
        "actor_type": "user",
        "actor_id": "alice",
        "action": "test",
        "resource_type": None,
        "resource_id": None,
        "method": "POST",
        "path": "/x",
        "ip": None,
        "user_agent": None,
        "request_id": None,
        "details": {"n": 1, "text": "grüß"},
        "created_at": AT,
    }
    return {**values, **changes}


@pytest.fixture
async def database(committed_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(committed_url, pool_size=2)
    try:
        yield database
    finally:
        await database.dispose()


async def write(database: Database, steps: list[tuple[Any, dict[str, Any]]]) -> tuple[bool, list[list[Any]]]:
    if database.inline_writer is not None:
        return database.inline_writer.transaction(steps)
    assert database.pooled_writer is not None
    return await database.pooled_writer.transaction(steps)


async def primed(database: Database, *steps: tuple[Any, dict[str, Any]]) -> None:
    """The writer compiles a statement at its second use: the first gives way."""
    for statement, values in steps:
        assert await write(database, [(statement, values)]) == (False, [])


async def stored(database: Database) -> dict[str, str]:
    async with unit_of_work(database, write=False) as session:
        rows = await session.execute(
            text("SELECT id, action FROM audit_events WHERE organization_id = 'org_writer'")
        )
        return {row.id: row.action for row in rows}


async def test_a_transaction_commits_every_statement_and_answers_the_rows_as_sqlalchemy_would(
    database: Database,
) -> None:
    await primed(database, (INSERT, event("aud_1")), (RENAME, {"event_id": "none", "new_action": "x"}))
    done, rows = await write(
        database, [(INSERT, event("aud_1")), (RENAME, {"event_id": "aud_1", "new_action": "renamed"})]
    )
    assert done and rows[0] == []
    [returned] = rows[1]
    assert returned.id == "aud_1" and returned.action == "renamed"
    assert returned.details == {"n": 1, "text": "grüß"}  # JSON through the column's type
    assert returned.created_at == AT  # an aware datetime, as the platform's column type answers
    assert await stored(database) == {"aud_1": "renamed"}


async def test_a_first_statement_that_finds_no_row_writes_nothing(database: Database) -> None:
    missing = {"event_id": "aud_missing", "new_action": "x"}
    await primed(database, (RENAME, missing), (INSERT, event("aud_2")))
    assert await write(database, [(RENAME, missing), (INSERT, event("aud_2"))]) == (False, [])
    assert await stored(database) == {}


async def test_a_failing_statement_rolls_back_the_whole_transaction(database: Database) -> None:
    await primed(database, (INSERT, event("aud_3")))
    # The second INSERT repeats the first one's primary key: the first must not be kept either.
    assert await write(database, [(INSERT, event("aud_3")), (INSERT, event("aud_3"))]) == (False, [])
    assert await stored(database) == {}
    assert (await write(database, [(INSERT, event("aud_3"))]))[0]
    assert await stored(database) == {"aud_3": "test"}


async def test_a_statement_missing_a_value_gives_way(database: Database) -> None:
    await primed(database, (INSERT, event("aud_4")))
    values = event("aud_4")
    del values["actor_id"]
    assert await write(database, [(INSERT, values)]) == (False, [])
    assert await stored(database) == {}


async def test_sqlite_gives_way_at_once_while_another_connection_writes(tmp_path: Path) -> None:
    database = Database.from_url(migrated.sqlite_url(tmp_path / "parley.db"), pool_size=2)
    try:
        await _gives_way_while_locked(database)
    finally:
        await database.dispose()


async def _gives_way_while_locked(database: Database) -> None:
    assert database.inline_writer is not None
    await primed(database, (INSERT, event("aud_5")))
    holder = sqlite3.connect(database.inline_writer.database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        # Busy time-out 0: SQLITE_BUSY at BEGIN, nothing written, no wait for the other writer.
        assert database.inline_writer.transaction([(INSERT, event("aud_5"))]) == (False, [])
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert database.inline_writer.transaction([(INSERT, event("aud_5"))])[0]
    assert await stored(database) == {"aud_5": "test"}
