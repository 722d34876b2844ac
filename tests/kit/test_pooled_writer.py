"""``kit.postgres.PooledWriter``: a write transaction of the usual shape (a statement, then plain
inserts) in one statement, one round trip, answered and stored as the transaction of several was.

Real parts: fresh databases on the local PostgreSQL (one with tables of the test's own, one migrated:
the platform's turn and audit statements), the platform's engine (``kit.db.create_engine``: its pool,
dialect, JSON codecs and types), asyncpg's connection under a wrapper that notes each statement sent.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import TypeDecorator

from parley.audit.service import _INSERT_EVENT
from parley.kit import postgres as kit_postgres
from parley.kit.crypto import SecretBox
from parley.kit.db import UTCDateTime, create_engine
from parley.kit.postgres import PooledWriter, merged_transaction
from parley.kit.prepared import PreparedRead
from parley.sessions.service import _INSERT_SESSION, _WRITE_TURN
from tests import migrated, pg

BOX = SecretBox(bytes(range(32)))


class Sealed(TypeDecorator[str]):
    """A string stored encrypted (as the platform seals secrets), opened when read."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return None if value is None else BOX.encrypt(value, bound_to="things.secret")

    def process_result_value(self, value: str | None, dialect: Any) -> str | None:
        return None if value is None else BOX.decrypt(value, bound_to="things.secret")


metadata = MetaData()
THINGS = Table(
    "things",
    metadata,
    Column("id", String(20), primary_key=True),
    Column("n", Integer, nullable=False),
    Column("flag", Boolean),
    Column("doc", JSON),
    Column("docb", postgresql.JSONB),
    Column("at", UTCDateTime),
    Column("secret", Sealed),
    Column("blob", LargeBinary),
)
NOTES = Table(
    "notes",
    metadata,
    Column("id", String(20), primary_key=True),
    Column("thing_id", String(20), ForeignKey("things.id"), nullable=False),
    Column("body", String(100), nullable=False),
    Column("doc", JSON),
    Column("docb", postgresql.JSONB),
    Column("at", UTCDateTime),
    Column("flag", Boolean),
    Column("secret", Sealed),
    Column("blob", LargeBinary),
    Column("n", Integer),
)
ADD_NOTE = insert(NOTES)
ADD_THING = insert(THINGS)
BUMP = (
    update(THINGS)
    .where(THINGS.c.id == bindparam("thing"), THINGS.c.n == bindparam("read_n"))
    .values(n=THINGS.c.n + 1, at=bindparam("now"), doc=bindparam("new_doc"))
    .returning(*THINGS.c)
)
AT = datetime(2026, 11, 29, 5, 0, 1, 250_000, tzinfo=UTC)


def thing(thing_id: str, **changes: Any) -> dict[str, Any]:
    values = {
        "id": thing_id,
        "n": 1,
        "flag": True,
        "doc": {"a": [1, 2], "text": "grüß"},
        "docb": {"b": None},
        "at": AT,
        "secret": "s3cret",
        "blob": b"\x00\x01",
    }
    return {**values, **changes}


def note(note_id: str, thing_id: str, **changes: Any) -> dict[str, Any]:
    values = {
        "id": note_id,
        "thing_id": thing_id,
        "body": "noted",
        "doc": {"k": "v", "list": [True, None, 1.5]},
        "docb": [1, {"x": "y"}],
        "at": AT - timedelta(hours=3),
        "flag": False,
        "secret": "pin 1234",
        "blob": b"\xff",
        "n": None,
    }
    return {**values, **changes}


def bump(thing_id: str, read_n: int = 1) -> dict[str, Any]:
    return {"thing": thing_id, "read_n": read_n, "now": AT + timedelta(days=1), "new_doc": {"bumped": True}}


class Sent:
    """What the writer sends on asyncpg: each call's method and SQL (each one round trip once asyncpg
    has the statement prepared on that connection)."""

    METHODS = frozenset({"execute", "executemany", "fetch", "fetchrow", "fetchval", "prepare"})

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        idle_driver = kit_postgres._idle_driver
        monkeypatch.setattr(kit_postgres, "_idle_driver", lambda fairy: self._wrapped(idle_driver(fairy)))

    def _wrapped(self, driver: Any) -> Any:
        return None if driver is None else _Noted(driver, self.calls)

    def clear(self) -> None:
        self.calls.clear()

    @property
    def statements(self) -> list[str]:
        """The statements that ran (not the one-time ``prepare`` of a statement's result columns)."""
        return [sql for method, sql in self.calls if method != "prepare"]


class _Noted:
    def __init__(self, driver: Any, calls: list[tuple[str, str]]) -> None:
        self._driver = driver
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._driver, name)
        if name not in Sent.METHODS:
            return attribute

        @functools.wraps(attribute)
        def noted(sql: str, *args: Any, **kwargs: Any) -> Any:
            self._calls.append((name, sql))
            return attribute(sql, *args, **kwargs)

        return noted


@pytest.fixture
def database_url() -> Iterator[str]:
    name, url = pg.create_database("parley_pooled_writer")
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=2)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(metadata.create_all)
        yield engine
    finally:
        await engine.dispose()


async def primed(writer: PooledWriter, *steps: tuple[Any, dict[str, Any]]) -> PooledWriter:
    """A writer that has seen each statement once (it prepares a statement at its second use)."""
    for statement, values in steps:
        assert await writer.transaction([(statement, values)]) == (False, [])
    return writer


async def rows(engine: AsyncEngine, table: Table) -> list[dict[str, Any]]:
    async with engine.connect() as connection:
        result = await connection.execute(select(table).order_by(table.c.id))
        return [dict(row._mapping) for row in result]


@pytest.fixture
async def writer(engine: AsyncEngine) -> PooledWriter:
    writer = await primed(PooledWriter(engine), (ADD_THING, thing("x")), (BUMP, bump("x")), (ADD_NOTE, {}))
    assert await rows(engine, THINGS) == []
    return writer


async def test_a_statement_and_its_inserts_commit_in_one_statement(
    engine: AsyncEngine, writer: PooledWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = Sent(monkeypatch)
    assert await writer.transaction([(ADD_THING, thing("t1")), (ADD_NOTE, note("n1", "t1"))]) == (
        True,
        [[], []],
    )
    assert len(sent.statements) == 1 and sent.statements[0].startswith("WITH parley_step_0 AS (INSERT")
    sent.clear()
    done, returned = await writer.transaction(
        [(BUMP, bump("t1")), (ADD_NOTE, note("n2", "t1")), (ADD_NOTE, note("n3", "t1", body="third"))]
    )
    assert sent.statements == [sent.statements[0]] and "WHERE EXISTS" in sent.statements[0]
    assert not any(sql in {"BEGIN", "COMMIT"} for _method, sql in sent.calls)
    assert done and returned[1:] == [[], []]
    [row] = returned[0]
    # The returned row went through the columns' types: JSON, an aware datetime, the decrypted secret.
    assert row._asdict() == thing("t1", n=2, at=AT + timedelta(days=1), doc={"bumped": True})
    assert await rows(engine, THINGS) == [thing("t1", n=2, at=AT + timedelta(days=1), doc={"bumped": True})]
    # Every type arrives as it was given, through INSERT ... VALUES and INSERT ... SELECT alike.
    assert await rows(engine, NOTES) == [
        note("n1", "t1"),
        note("n2", "t1"),
        note("n3", "t1", body="third"),
    ]


async def test_the_answer_and_what_is_stored_are_those_of_the_transaction_of_several_statements(
    engine: AsyncEngine, writer: PooledWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = []
    for suffix, merge in (("a", True), ("b", False)):
        if not merge:  # a writer of its own: the first one keeps the merged statements it built
            monkeypatch.setattr(kit_postgres, "merged_transaction", lambda _prepared: None)
            writer = await primed(PooledWriter(engine), (ADD_THING, {}), (BUMP, {}), (ADD_NOTE, {}))
        sent = Sent(monkeypatch)
        opened = [(ADD_THING, thing(f"t{suffix}")), (ADD_NOTE, note(f"o{suffix}", f"t{suffix}"))]
        assert (await writer.transaction(opened))[0]
        done, returned = await writer.transaction(
            [(BUMP, bump(f"t{suffix}")), (ADD_NOTE, note(f"n{suffix}", f"t{suffix}", n=7))]
        )
        assert done and len(sent.statements) == (2 if merge else 2 * 4)
        answers.append([{**row._asdict(), "id": None} for row in returned[0]] + returned[1:])
    assert answers[0] == answers[1]
    stored = [{**row, "id": None} for row in await rows(engine, THINGS)]
    assert stored[0] == stored[1]
    notes = [{**row, "id": None, "thing_id": None} for row in await rows(engine, NOTES)]
    assert notes[0] == notes[1] and notes[2] == notes[3]  # n_a, n_b, o_a, o_b


async def test_no_row_found_writes_nothing(
    engine: AsyncEngine, writer: PooledWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await writer.transaction([(ADD_THING, thing("t1"))]))[0]
    sent = Sent(monkeypatch)
    # The version read is no longer the row's: the UPDATE finds nothing, so neither insert is made.
    stale = [(BUMP, bump("t1", read_n=5)), (ADD_NOTE, note("n1", "t1")), (ADD_NOTE, note("n2", "t1"))]
    assert await writer.transaction(stale) == (False, [])
    assert len(sent.statements) == 1
    assert await rows(engine, NOTES) == []
    assert await rows(engine, THINGS) == [thing("t1")]


@pytest.mark.parametrize(
    "broken",
    [
        {"thing_id": "missing"},  # a foreign key to no row
        {"body": None},  # NOT NULL
        {"id": "n0"},  # the primary key of the note written before
    ],
)
async def test_a_failing_insert_leaves_the_first_statement_unapplied(
    engine: AsyncEngine, writer: PooledWriter, monkeypatch: pytest.MonkeyPatch, broken: dict[str, Any]
) -> None:
    assert (await writer.transaction([(ADD_THING, thing("t1")), (ADD_NOTE, note("n0", "t1"))]))[0]
    sent = Sent(monkeypatch)
    failing = [(BUMP, bump("t1")), (ADD_NOTE, note("n1", "t1")), (ADD_NOTE, {**note("n2", "t1"), **broken})]
    assert await writer.transaction(failing) == (False, [])
    assert len(sent.statements) == 1
    assert await rows(engine, THINGS) == [thing("t1")]
    assert [row["id"] for row in await rows(engine, NOTES)] == ["n0"]
    # The connection is clean (no transaction left open): the same transaction, mended, commits.
    mended = [(BUMP, bump("t1")), (ADD_NOTE, note("n1", "t1")), (ADD_NOTE, note("n2", "t1"))]
    assert (await writer.transaction(mended))[0]
    assert [row["id"] for row in await rows(engine, NOTES)] == ["n0", "n1", "n2"]


async def test_a_shape_that_cannot_be_merged_runs_as_a_transaction_of_several_statements(
    engine: AsyncEngine, writer: PooledWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = Sent(monkeypatch)
    # The UPDATE must see the row the INSERT before it wrote: not in one statement's snapshot.
    done, returned = await writer.transaction([(ADD_THING, thing("t1")), (BUMP, bump("t1"))])
    assert done and [row.n for row in returned[1]] == [2]
    assert [sql for sql in sent.statements if sql in {"BEGIN", "COMMIT"}] == ["BEGIN", "COMMIT"]
    assert len(sent.statements) == 4
    assert [row["n"] for row in await rows(engine, THINGS)] == [2]


def test_only_plain_inserts_after_the_first_statement_are_merged() -> None:
    dialect = asyncpg_dialect()

    def merged(*statements: Any) -> str | None:
        return merged_transaction([PreparedRead(statement, dialect) for statement in statements])

    assert merged(BUMP, ADD_NOTE) is not None
    assert merged(ADD_THING, ADD_NOTE, ADD_NOTE) is not None
    assert merged(select(THINGS), ADD_NOTE) is None  # the first statement writes
    assert merged(ADD_THING, BUMP) is None
    stale = insert(THINGS)
    PreparedRead(stale, dialect)  # SQLAlchemy keeps its (no) columns on the copy .returning() makes
    assert merged(stale.returning(THINGS.c.id), ADD_NOTE) is None
    assert merged(ADD_THING, ADD_NOTE.returning(NOTES.c.id)) is None
    assert merged(ADD_THING, postgresql.insert(NOTES).on_conflict_do_nothing()) is None
    assert merged(ADD_THING, insert(NOTES).values([note("a", "b"), note("c", "d")])) is None
    assert (
        merged(
            ADD_THING,
            insert(NOTES).from_select(
                ["id", "thing_id", "body"], select(THINGS.c.id, THINGS.c.id, THINGS.c.id)
            ),
        )
        is None
    )
    reads = insert(NOTES).values(
        id=bindparam("id"), body=select(THINGS.c.id).where(THINGS.c.n == 1).scalar_subquery()
    )
    assert merged(ADD_THING, reads) is None  # it would not see the first statement's row
    assert (
        merged(ADD_THING, insert(NOTES).values(id=bindparam("id"), body=text("'$1'"))) is None
    )  # a literal $1


# --- the platform's own statements: a conversation turn and its audit event ------------------------


@pytest.fixture
def platform_url() -> Iterator[str]:
    name, url = migrated.postgres("parley_pooled_writer_turn")
    try:
        yield url
    finally:
        pg.drop_database(name)


@pytest.fixture
async def platform_engine(platform_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(platform_url, pool_size=2)
    try:
        yield engine
    finally:
        await engine.dispose()


def session_row(session_id: str) -> dict[str, Any]:
    return {
        "id": session_id,
        "flow_id": "flw_1",
        "flow_version": 3,
        "channel": "web",
        "direction": "inbound",
        "voiced": False,
        "voice_connected": False,
        "status": "active",
        "outcome": None,
        "end_reason": None,
        "caller": "+15550100",
        "callee": None,
        "language": "en",
        "state": {"node": "ask", "variables": {"q": "grüß"}},
        "version": 1,
        "started_at": AT,
        "last_activity_at": AT,
        "ended_at": None,
        "created_by": "usr_1",
        "organization_id": "org_1",
        "created_at": AT,
        "updated_at": AT,
    }


def audit(event_id: str, session_id: str) -> dict[str, Any]:
    return {
        "id": event_id,
        "organization_id": "org_1",
        "actor_type": "user",
        "actor_id": "usr_1",
        "action": "session.message",
        "resource_type": "session",
        "resource_id": session_id,
        "method": "POST",
        "path": f"/api/sessions/{session_id}/messages",
        "ip": None,
        "user_agent": None,
        "request_id": "req_1",
        "details": {"turn": 1},
        "created_at": AT,
    }


def turn(session_id: str, read_version: int = 1) -> dict[str, Any]:
    return {
        "in_organization": "org_1",
        "in_session": session_id,
        "read_version": read_version,
        "new_state": {"node": "tell", "variables": {"q": "grüß"}},
        "new_language": None,
        "now": AT + timedelta(seconds=5),
    }


async def test_a_turn_and_its_audit_event_in_one_statement(
    platform_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await primed(
        PooledWriter(platform_engine),
        (_INSERT_SESSION, session_row("x")),
        (_WRITE_TURN, turn("x")),
        (_INSERT_EVENT, audit("x", "x")),
    )
    sent = Sent(monkeypatch)
    for session_id in ("ses_1", "ses_2"):  # the opening: the session's row and its audit event
        opened = [
            (_INSERT_SESSION, session_row(session_id)),
            (_INSERT_EVENT, audit(f"aud_{session_id}", session_id)),
        ]
        assert await writer.transaction(opened) == (True, [[], []])
    assert len(sent.statements) == 2
    sent.clear()
    done, merged = await writer.transaction(
        [(_WRITE_TURN, turn("ses_1")), (_INSERT_EVENT, audit("aud_t1", "ses_1"))]
    )
    assert done and len(sent.statements) == 1
    monkeypatch.setattr(kit_postgres, "merged_transaction", lambda _prepared: None)
    several_writer = await primed(PooledWriter(platform_engine), (_WRITE_TURN, {}), (_INSERT_EVENT, {}))
    done, several = await several_writer.transaction(
        [(_WRITE_TURN, turn("ses_2")), (_INSERT_EVENT, audit("aud_t2", "ses_2"))]
    )
    assert done and len(sent.statements) == 1 + 4  # BEGIN, the UPDATE, the INSERT, COMMIT
    assert [{**row._asdict(), "id": None} for row in merged[0]] == [
        {**row._asdict(), "id": None} for row in several[0]
    ]
    [row] = merged[0]
    assert row.version == 2 and row.last_activity_at == AT + timedelta(seconds=5) and row.language is None
    # A stale version: nothing written, the audit event included.
    stale = [(_WRITE_TURN, turn("ses_1", read_version=1)), (_INSERT_EVENT, audit("aud_stale", "ses_1"))]
    assert await writer.transaction(stale) == (False, [])
    async with platform_engine.connect() as connection:
        events = (await connection.execute(text("SELECT id, details FROM audit_events ORDER BY id"))).all()
        states = (
            await connection.execute(text("SELECT id, version, state FROM conversation_sessions ORDER BY id"))
        ).all()
    assert [tuple(event) for event in events] == [
        ("aud_ses_1", {"turn": 1}),
        ("aud_ses_2", {"turn": 1}),
        ("aud_t1", {"turn": 1}),
        ("aud_t2", {"turn": 1}),
    ]
    assert [tuple(state) for state in states] == [
        ("ses_1", 2, turn("ses_1")["new_state"]),
        ("ses_2", 2, turn("ses_2")["new_state"]),
    ]


async def test_a_connection_beyond_the_pool_size_is_closed_when_given_back_to_a_full_pool(
    engine: AsyncEngine, writer: PooledWriter, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool (two connections and one more) closes the third when the other two are idle again:
    that close awaits the driver, so the writer gives it back in a greenlet."""
    go_on = asyncio.Event()
    idle_driver = kit_postgres._idle_driver

    class Held:
        def __init__(self, driver: Any) -> None:
            self._driver = driver

        def __getattr__(self, name: str) -> Any:
            return getattr(self._driver, name)

        async def fetch(self, *args: Any) -> Any:
            await go_on.wait()
            return await self._driver.fetch(*args)

    monkeypatch.setattr(kit_postgres, "_idle_driver", lambda fairy: Held(idle_driver(fairy)))
    async with engine.connect() as first, engine.connect() as second:
        for connection in (first, second):
            await connection.exec_driver_sql("SELECT 1")
        writing = asyncio.create_task(
            writer.transaction([(ADD_THING, thing("t1")), (ADD_NOTE, note("n1", "t1"))])
        )
        while engine.sync_engine.pool.checkedout() < 3:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
    go_on.set()  # the two are idle again: the writer's is the third
    assert await writing == (True, [[], []])
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    name = database_url.rsplit("/", 1)[-1]
    async with engine.connect() as connection:
        backends = await connection.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
        )
    assert backends == 2  # the third was closed (not left open behind a failed close)
