"""PostgreSQL: BEGIN waits for the first statement that is not a plain read (parley.kit.postgres).

Real parts: the local PostgreSQL server, the platform's engine (``kit.db.create_engine``) and app. What
reaches the server is recorded where asyncpg's ``Transaction`` sends ``BEGIN``, ``COMMIT`` and
``ROLLBACK`` and with SQLAlchemy's ``after_cursor_execute`` (every statement that ran).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from asyncpg.transaction import Transaction
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from parley.app import create_app
from parley.config import Settings
from parley.kit.db import Database, create_engine
from parley.kit.postgres import plain_read
from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth
from tests.organizations.test_router import ALICE, create_org


@pytest.mark.parametrize(
    ("sql", "plain"),
    [
        ("SELECT api_keys.id FROM api_keys WHERE api_keys.id = $1::VARCHAR", True),
        ("  select 1", True),
        ("SELECT count(*) AS count_1 FROM calls WHERE calls.organization_id = $1", True),
        ("SELECT flows.id FROM flows WHERE flows.id = $1 FOR UPDATE", False),
        ("SELECT flows.id FROM flows WHERE flows.id = $1 FOR UPDATE SKIP LOCKED", False),
        ("SELECT flows.id FROM flows FOR NO KEY UPDATE", False),
        ("SELECT flows.id FROM flows FOR SHARE", False),
        ("SELECT flows.id FROM flows for key share nowait", False),
        ("SELECT * INTO copy FROM flows", False),
        ("SELECT nextval('calls_seq')", False),
        ("SELECT pg_advisory_xact_lock(1)", False),
        ("SELECT pg_try_advisory_lock(1)", False),
        ("SELECT set_config('x.y', 'z', true)", False),
        ("SELECT pg_notify('jobs', '')", False),
        ("SELECT txid_current()", False),
        ("INSERT INTO flows (id) VALUES ($1)", False),
        ("UPDATE api_keys SET last_used_at=$1 WHERE api_keys.id = $2", False),
        ("WITH x AS (DELETE FROM flows RETURNING id) SELECT id FROM x", False),
        ("SAVEPOINT sa_savepoint_1", False),
    ],
)
def test_plain_read(sql: str, plain: bool) -> None:
    assert plain_read(sql) is plain


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    name, url = migrated.postgres("parley_deferred")
    yield url
    pg.drop_database(name)


class Statements:
    """What an engine sent, in order: asyncpg's transaction statements (its ``Transaction`` sends
    ``BEGIN``, ``COMMIT`` and ``ROLLBACK``), the first word of every statement SQLAlchemy ran and of
    every one the pooled row reader (``kit.postgres.PooledReader``) ran straight on asyncpg."""

    def __init__(self, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        for method, word in (("start", "BEGIN"), ("commit", "COMMIT"), ("rollback", "ROLLBACK")):
            monkeypatch.setattr(Transaction, method, self._recording(getattr(Transaction, method), word))
        fetch = asyncpg.Connection.fetch

        async def fetched(connection: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
            self.sent.append(query.split()[0].upper())
            return await fetch(connection, query, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "fetch", fetched)

        @event.listens_for(engine.sync_engine, "after_cursor_execute")
        def _statement(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            self.sent.append(statement.split()[0].upper())

    def _recording(self, original: Callable[[Transaction], Awaitable[None]], word: str) -> Any:
        async def recorded(transaction: Transaction) -> None:
            self.sent.append(word)
            await original(transaction)

        return recorded

    def take(self) -> list[str]:
        sent, self.sent = self.sent, []
        return sent


@pytest.fixture
async def engine(pg_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(pg_url, pool_size=2)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS deferred (id int PRIMARY KEY, note text)"))
        await conn.execute(text("TRUNCATE deferred"))
        await conn.execute(text("INSERT INTO deferred VALUES (1, 'one')"))
    yield engine


@pytest.fixture
def statements(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> Statements:
    return Statements(engine, monkeypatch)


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


async def _count(session: AsyncSession) -> int:
    return int((await session.execute(text("SELECT count(*) FROM deferred"))).scalar_one())


async def test_a_session_that_only_reads_opens_no_transaction(
    engine: AsyncEngine, statements: Statements, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session:
        assert await _count(session) == 1
        assert await _count(session) == 1
        await session.commit()
    async with sessions() as session:
        await _count(session)
        await session.rollback()
    assert statements.take() == ["SELECT", "SELECT", "SELECT"]


async def test_a_write_after_reads_opens_the_transaction_and_is_undone_by_its_rollback(
    engine: AsyncEngine, statements: Statements, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session:
        await _count(session)
        await session.execute(text("INSERT INTO deferred VALUES (2, 'two')"))
        assert await _count(session) == 2  # its own write, inside its transaction
        await session.rollback()
    assert statements.take() == ["SELECT", "BEGIN", "INSERT", "SELECT", "ROLLBACK"]
    async with sessions() as session:
        assert await _count(session) == 1
        await session.execute(text("INSERT INTO deferred VALUES (2, 'two')"))
        await session.commit()
    async with sessions() as session:
        assert await _count(session) == 2
    assert statements.take() == ["SELECT", "BEGIN", "INSERT", "COMMIT", "SELECT"]


async def test_select_for_update_runs_in_the_transaction_and_holds_its_lock(
    engine: AsyncEngine, pg_url: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    other = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with sessions() as session:
            await session.execute(text("SELECT id FROM deferred WHERE id = 1 FOR UPDATE"))
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.fetch("SELECT id FROM deferred WHERE id = 1 FOR UPDATE NOWAIT")
            await session.rollback()
        assert await other.fetch("SELECT id FROM deferred WHERE id = 1 FOR UPDATE NOWAIT")
    finally:
        await other.close()


async def test_repeatable_read_begins_before_its_first_read_and_keeps_its_snapshot(
    engine: AsyncEngine, statements: Statements
) -> None:
    repeatable = async_sessionmaker(engine.execution_options(isolation_level="REPEATABLE READ"))
    async with repeatable() as session, engine.begin() as writer:
        assert await _count(session) == 1
        await writer.execute(text("INSERT INTO deferred VALUES (3, 'three')"))
        await writer.commit()
        assert await _count(session) == 1  # the transaction's snapshot, taken at its first read
        await session.commit()
    assert statements.take() == ["BEGIN", "SELECT", "BEGIN", "INSERT", "COMMIT", "SELECT", "COMMIT"]


async def test_a_failed_plain_read_leaves_the_session_usable(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions() as session:
        with pytest.raises(Exception, match="division by zero"):
            await session.execute(text("SELECT 1 / 0"))
        await session.rollback()
        assert await _count(session) == 1


@pytest.fixture
async def platform(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, Statements]]:
    database = Database.from_url(pg_url, pool_size=2)
    recorded = Statements(database.engine, monkeypatch)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=pg_url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        log_json=False,
    )
    try:
        yield create_app(settings, database=database), recorded
    finally:
        await database.dispose()


async def test_through_the_api_a_get_reads_without_a_transaction_and_a_key_use_commits(
    platform: tuple[Any, Statements],
) -> None:
    app, recorded = platform
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as client:
        org = await create_org(client)
        headers = auth(ALICE, str(org["id"]))
        created = await client.post(
            "/api/api-keys", json={"name": "reads", "scopes": ["admin"]}, headers=headers
        )
        assert created.status_code == 200, created.text
        key = created.json()
        path = f"/api/api-keys/{key['id']}"
        assert (await client.get(path, headers=headers)).status_code == 200  # caches warm
        recorded.take()

        got = await client.get(path, headers=headers)
        assert got.status_code == 200, got.text
        assert got.json()["last_used_at"] is None
        sent = recorded.take()
        assert sent and set(sent) == {"SELECT"}, sent  # one round trip per statement, no BEGIN/ROLLBACK

        # A GET authenticated with the key notes its use: that write opens a transaction and commits.
        used = await client.get(path, headers={"Authorization": f"Bearer {key['secret']}"})
        assert used.status_code == 200, used.text
        sent = recorded.take()
        assert "UPDATE" in sent, sent
        assert "COMMIT" in sent and sent.index("BEGIN") < sent.index("UPDATE") < sent.index("COMMIT"), sent
        assert "BEGIN" not in sent[: sent.index("SELECT") + 1], sent  # the reads before it ran on their own
        after = await client.get(path, headers=headers)
        assert after.json()["last_used_at"] is not None

        # A write request still runs in one transaction, ended by its commit.
        renamed = await client.post("/api/organizations", json={"name": "Second"}, headers=auth(ALICE))
        assert renamed.status_code == 200, renamed.text
        sent = recorded.take()
        assert sent.count("BEGIN") == 1 and sent[-1] == "COMMIT", sent
