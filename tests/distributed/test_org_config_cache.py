"""The per-organization configuration cache across processes: a privacy setting changed on A is applied
by B's next turn once Redis has told B; with Redis stopped B falls back to entries of 1 s.

Two ``parley serve`` processes (A and B) share a fresh PostgreSQL database and a private redis-server
(tests/ops/redis_server.py, so that it can be stopped). A conversation on B redacts the caller's text
with the organization's privacy settings, which B keeps in its cache (kit/orgcache.py). A change made in
the database without a session (as ``psql`` would) is not published: B keeps answering from its entry
past the 1-s lifetime, which shows that entries live long while subscribed. A change made through A's
API is published; B's ``/metrics`` counts the invalidation received and B's next turn applies it. The
delay is measured by bench/org_config_bench.py (docs/benchmarks.md); the bounds asserted here are
generous (a few seconds, against an entry lifetime of 30 s).
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import sys
import time
from collections.abc import Iterator

import asyncpg
import httpx
import pytest

from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth, make_token
from tests.distributed.test_identity_cache import Pair, metric, until
from tests.ops.redis_server import RedisServer
from tests.sessions.test_router import ECHO

pytestmark = pytest.mark.slow

PHONE = "ruf mich an unter 0171 9876543"
REDACTED = "ruf mich an unter [phone]"
GENEROUS = 5.0  # seconds; the entries would otherwise live 30 s (subscribed) or 1 s (Redis down)


class Setup:
    def __init__(self, pair: Pair, redis: RedisServer, dsn: str) -> None:
        self.pair = pair
        self.redis = redis
        self.dsn = dsn


def received(url: str) -> float:
    return metric(url, "parley_org_config_invalidations_total", 'origin="redis"')


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("org-config")
    redis = RedisServer(root)
    db_name, db_url = migrated.postgres("parley_org_config")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") and k != "PYTHONPATH"}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p.endswith("src"))
            or os.environ.get("PYTHONPATH", ""),
            "PARLEY_DATABASE_URL": db_url,
            "PARLEY_REDIS_URL": redis.url,
            "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
            "PARLEY_SECRET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="),
            "PARLEY_DB_POOL_SIZE": "5",
            "PARLEY_LOG_LEVEL": "WARNING",
            "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
            "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
        }
    )
    pair = Pair(root, env)
    try:
        redis.start()
        pair.start()
        yield Setup(pair, redis, db_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    finally:
        pair.stop()
        redis.stop()
        pg.drop_database(db_name)


class Conversation:
    """An organization (made on A) with a published echo flow, and a session on B."""

    def __init__(self, setup: Setup, user: str) -> None:
        self.setup = setup
        a, b = setup.pair.a, setup.pair.b
        created = httpx.post(f"{a}/api/organizations", json={"name": user}, headers=auth(make_token(user)))
        assert created.status_code == 200, created.text
        self.org = str(created.json()["id"])
        self.headers = auth(make_token(user), self.org)
        flow = httpx.post(f"{a}/api/flows", json={"name": "Echo", "definition": ECHO}, headers=self.headers)
        assert flow.status_code == 200, flow.text
        published = httpx.post(f"{a}/api/flows/{flow.json()['id']}/publish", headers=self.headers)
        assert published.status_code == 200, published.text
        session = httpx.post(f"{b}/api/sessions", json={"flow_id": flow.json()["id"]}, headers=self.headers)
        assert session.status_code == 200, session.text
        self.session = str(session.json()["id"])

    def redaction_on_a(self, enabled: bool) -> None:
        changed = httpx.patch(
            f"{self.setup.pair.a}/api/privacy/settings",
            json={"redaction_enabled": enabled},
            headers=self.headers,
        )
        assert changed.status_code == 200, changed.text

    def redaction_in_database(self, enabled: bool) -> None:
        """The setting changed without a session (nothing published), as ``psql`` would."""

        async def write() -> None:
            connection = await asyncpg.connect(self.setup.dsn)
            try:
                await connection.execute(
                    "UPDATE privacy_settings SET redaction_enabled = $1 WHERE organization_id = $2",
                    enabled,
                    self.org,
                )
            finally:
                await connection.close()

        asyncio.run(write())

    def said_on_b(self, text: str = PHONE) -> str:
        """What B's transcript keeps of the caller's ``text`` (redacted or not); never an error."""
        b = self.setup.pair.b
        said = httpx.post(
            f"{b}/api/sessions/{self.session}/messages", json={"text": text}, headers=self.headers
        )
        assert said.status_code == 200, said.text
        state = httpx.get(f"{b}/api/sessions/{self.session}", headers=self.headers).json()
        return str([t["text"] for t in state["transcript"] if t["speaker"] == "caller"][-1])

    def until_said_on_b(self, expected: str) -> float:
        """Seconds until B's next turn keeps ``expected``, asking again and again (at most GENEROUS)."""
        start = time.monotonic()
        while (kept := self.said_on_b()) != expected:
            assert time.monotonic() - start < GENEROUS, kept
            time.sleep(0.02)
        return time.monotonic() - start


def _subscribed(conversation: Conversation) -> None:
    """Changes on A until B receives one (B subscribes shortly after its start)."""
    b = conversation.setup.pair.b
    enabled = False
    for _ in range(100):
        seen = received(b)
        conversation.redaction_on_a(enabled)
        enabled = not enabled
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if received(b) > seen:
                return
            time.sleep(0.02)
    raise AssertionError("B never received an invalidation")


def test_a_privacy_change_on_a_is_applied_by_bs_next_turn(setup: Setup) -> None:
    conversation = Conversation(setup, "org-config-owner")
    _subscribed(conversation)
    conversation.redaction_on_a(False)
    until(lambda: conversation.said_on_b() == PHONE)  # B's entry: redaction off

    # Not published (no session): B keeps its entry past the 1-s lifetime of a process without Redis.
    conversation.redaction_in_database(True)
    time.sleep(1.5)
    assert conversation.said_on_b() == PHONE
    conversation.redaction_in_database(False)

    seen = received(setup.pair.b)
    conversation.redaction_on_a(True)  # published on <prefix>:org_config
    until(lambda: received(setup.pair.b) > seen)  # B dropped the entry when Redis told it
    assert conversation.said_on_b() == REDACTED

    conversation.redaction_on_a(False)
    assert conversation.until_said_on_b(PHONE) < GENEROUS


def test_with_redis_stopped_b_falls_back_to_one_second_entries(setup: Setup) -> None:
    """Last in the module: it stops the Redis server."""
    conversation = Conversation(setup, "org-config-outage")
    conversation.redaction_on_a(False)
    until(lambda: conversation.said_on_b() == PHONE)
    setup.redis.stop()
    before = received(setup.pair.b)

    # Nothing can be published now; B's entries live 1 s, so it reads the change anyway.
    conversation.redaction_in_database(True)
    assert conversation.until_said_on_b(REDACTED) < GENEROUS
    conversation.redaction_on_a(False)  # A answers (the publication fails quietly)
    assert conversation.until_said_on_b(PHONE) < GENEROUS
    assert received(setup.pair.b) == before
    assert httpx.get(f"{setup.pair.b}/readyz").json()["checks"]["redis"] == "unreachable"
