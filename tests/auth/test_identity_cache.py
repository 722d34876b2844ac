"""The in-process identity cache: hits for repeated requests, and every change takes effect at once.

Two processes and Redis are in tests/distributed/test_identity_cache.py; here one app, both engines.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update

from parley.auth.cache import (
    LOCAL_TTL,
    MISS,
    SHORT_TTL,
    Changes,
    IdentityBus,
    IdentityCache,
    KeySnapshot,
    identity_cache_of,
)
from parley.auth.models import ApiKey
from parley.config import Settings
from parley.kit.db import Database, unit_of_work
from tests.conftest import auth, committed_app, make_token
from tests.live import free_port
from tests.organizations.test_router import ALICE, create_org


def _hits(app: Any) -> tuple[int, int]:
    cache: IdentityCache = app.state.identity_cache
    return len(cache._keys), len(cache._roles)


async def _key(client: httpx.AsyncClient, headers: dict[str, str], scopes: list[str]) -> tuple[str, str]:
    created = await client.post("/api/api-keys", json={"name": "k", "scopes": scopes}, headers=headers)
    assert created.status_code == 200, created.text
    return str(created.json()["id"]), str(created.json()["secret"])


async def test_a_revoked_key_is_refused_on_the_next_request(client: httpx.AsyncClient, app: Any) -> None:
    org = await create_org(client)
    owner = auth(ALICE, str(org["id"]))
    key_id, secret = await _key(client, owner, ["read"])
    key = {"Authorization": f"Bearer {secret}"}
    for _ in range(3):
        assert (await client.get("/api/me", headers=key)).status_code == 200
    cache: IdentityCache = app.state.identity_cache
    assert cache.key(key_id) is not None  # answered from the cache

    assert (await client.post(f"/api/api-keys/{key_id}/revoke", headers=owner)).status_code == 200
    assert cache.key(key_id) is None
    refused = await client.get("/api/me", headers=key)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "The API key has been revoked."


async def test_a_wrong_secret_for_a_cached_key_is_refused(client: httpx.AsyncClient, app: Any) -> None:
    org = await create_org(client)
    _, secret = await _key(client, auth(ALICE, str(org["id"])), ["read"])
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {secret}"})).status_code == 200
    forged = secret[:-4] + ("aaaa" if not secret.endswith("aaaa") else "bbbb")
    refused = await client.get("/api/me", headers={"Authorization": f"Bearer {forged}"})
    assert refused.status_code == 401
    assert refused.json()["detail"] == "The API key is not valid."


async def test_membership_changes_apply_on_the_next_request(client: httpx.AsyncClient, app: Any) -> None:
    org = await create_org(client)
    org_id = str(org["id"])
    owner = auth(ALICE, org_id)
    added = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "carol", "role": "admin"}, headers=owner
    )
    assert added.status_code == 200, added.text
    carol = auth(make_token("carol"), org_id)
    for _ in range(2):
        assert (await client.get("/api/api-keys", headers=carol)).status_code == 200
    user_id = added.json()["user_id"]
    cache: IdentityCache = app.state.identity_cache
    assert cache.role(user_id, org_id) == "admin"

    lowered = await client.patch(
        f"/api/organizations/{org_id}/members/{user_id}", json={"role": "viewer"}, headers=owner
    )
    assert lowered.status_code == 200, lowered.text
    forbidden = await client.get("/api/api-keys", headers=carol)
    assert forbidden.status_code == 403
    assert forbidden.json()["detail"] == "This needs the admin role or higher; your role is viewer."

    removed = await client.delete(f"/api/organizations/{org_id}/members/{user_id}", headers=owner)
    assert removed.status_code == 200, removed.text
    gone = await client.get(f"/api/organizations/{org_id}", headers=carol)
    assert gone.status_code == 404
    assert gone.json()["detail"] == f"Organization {org_id!r} was not found."


async def test_a_member_added_after_a_refusal_is_let_in(client: httpx.AsyncClient) -> None:
    """ "Not a member" is cached too; adding the member drops it."""
    org = await create_org(client)
    org_id = str(org["id"])
    dave = auth(make_token("dave"), org_id)
    assert (await client.get(f"/api/organizations/{org_id}", headers=dave)).status_code == 404
    added = await client.post(
        f"/api/organizations/{org_id}/members",
        json={"subject": "dave", "role": "member"},
        headers=auth(ALICE, org_id),
    )
    assert added.status_code == 200, added.text
    assert (await client.get(f"/api/organizations/{org_id}", headers=dave)).status_code == 200


async def test_deleting_the_organization_drops_its_entries(client: httpx.AsyncClient, app: Any) -> None:
    org = await create_org(client)
    org_id = str(org["id"])
    owner = auth(ALICE, org_id)
    key_id, secret = await _key(client, owner, ["admin"])
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {secret}"})).status_code == 200
    cache: IdentityCache = app.state.identity_cache
    assert cache.key(key_id) is not None
    deleted = await client.delete(f"/api/organizations/{org_id}", headers=owner)
    assert deleted.status_code == 200, deleted.text
    assert cache.key(key_id) is None
    assert (await client.get("/api/me", headers={"Authorization": f"Bearer {secret}"})).status_code == 401


async def test_a_bulk_update_of_an_identity_table_empties_the_cache(database: Database) -> None:
    cache = identity_cache_of(database)
    cache.put_role("usr_x", "org_x", "owner", cache.generation)
    async with unit_of_work(database) as session:
        await session.execute(update(ApiKey).where(ApiKey.id == "key_none").values(name="renamed"))
    assert cache.role("usr_x", "org_x") is not None and cache._roles == {}


def _snapshot(key_id: str) -> KeySnapshot:
    now = datetime.now(UTC)
    return KeySnapshot(key_id, "org_1", "k", "0" * 64, frozenset({"read"}), None, None, now)


def test_a_read_that_raced_an_invalidation_is_not_stored() -> None:
    cache = IdentityCache()
    generation = cache.generation  # a request starts reading the row
    cache.invalidate(Changes(keys={"key_1"}))  # meanwhile the key is revoked
    cache.put_key(_snapshot("key_1"), generation)
    assert cache.key("key_1") is None
    cache.put_key(_snapshot("key_1"), cache.generation)
    assert cache.key("key_1") is not None


def test_changes_survive_the_trip_through_redis() -> None:
    changes = Changes(keys={"key_1"}, members={("usr_1", "org_1")}, organizations={"org_2"}, users={"usr_2"})
    assert Changes.from_json(changes.to_json()) == changes
    assert not Changes() and Changes(everything=True)


async def test_with_redis_unreachable_entries_live_one_second_and_changes_do_not_fail(tmp_path: Any) -> None:
    cache = IdentityCache()
    assert cache.ttl == LOCAL_TTL  # no Redis: this process's changes apply at once, others' within 5 s
    settings = Settings(data_dir=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    bus = IdentityBus.from_settings(cache, settings)
    bus.start()
    try:
        assert cache.ttl == SHORT_TTL and not cache.subscribed
        cache.committed(Changes(keys={"key_1"}))  # publishing fails quietly; the local drop happens
        for task in list(bus._publishing):
            await task
        assert bus.publish_failures == 1 and bus.published == 0
    finally:
        await bus.stop()
    assert cache.bus is None


async def test_a_received_message_is_applied_and_a_malformed_one_empties_the_cache(tmp_path: Any) -> None:
    cache = IdentityCache()
    settings = Settings(data_dir=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    bus = IdentityBus.from_settings(cache, settings)  # not started: messages are handed in
    cache.put_role("usr_1", "org_1", "owner", cache.generation)
    cache.put_role("usr_2", "org_1", "member", cache.generation)
    bus._received(
        json.dumps({"sender": "another", "changes": Changes(members={("usr_1", "org_1")}).to_dict()})
    )
    assert cache.role("usr_1", "org_1") is MISS and cache.role("usr_2", "org_1") == "member"
    bus._received(json.dumps({"sender": bus.sender, "changes": {"everything": True}}))  # its own
    assert cache.role("usr_2", "org_1") == "member"
    for body in ({"sender": "another", "changes": ["not", "an", "object"]}, {"sender": "another"}, "[]"):
        cache.put_role("usr_2", "org_1", "member", cache.generation)
        bus._received(body if isinstance(body, str) else json.dumps(body))
        assert cache.role("usr_2", "org_1") is MISS
    await bus.redis.aclose()


# --- a role read once for every request that misses it meanwhile -------------------------------


class _RoleReads:
    """A membership read that waits for ``release`` and counts how often it ran."""

    def __init__(self, role: str | None = "member") -> None:
        self.role = role
        self.count = 0
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self) -> str | None:
        self.count += 1
        await self.release.wait()
        if self.fail:
            raise ConnectionError("the database went away")
        return self.role


async def test_concurrent_misses_of_one_role_read_it_once() -> None:
    cache = IdentityCache()
    read = _RoleReads("admin")
    readers = [asyncio.create_task(cache.read_role("usr_1", "org_1", read)) for _ in range(10)]
    await asyncio.sleep(0)
    read.release.set()
    assert await asyncio.gather(*readers) == ["admin"] * 10
    assert read.count == 1
    assert cache.role("usr_1", "org_1") == "admin"
    assert cache._reading == {}


async def test_a_miss_after_an_invalidation_does_not_take_the_read_that_began_before() -> None:
    cache = IdentityCache()
    before, after = _RoleReads("admin"), _RoleReads(None)  # the membership was removed meanwhile
    first = asyncio.create_task(cache.read_role("usr_1", "org_1", before))
    await asyncio.sleep(0)
    cache.invalidate(Changes(members={("usr_1", "org_1")}))
    second = asyncio.create_task(cache.read_role("usr_1", "org_1", after))
    await asyncio.sleep(0)
    before.release.set()
    after.release.set()
    assert await asyncio.gather(first, second) == ["admin", None]
    assert (before.count, after.count) == (1, 1)
    assert cache.role("usr_1", "org_1") is None  # the newer read's answer (not a member) is what is kept


async def test_when_the_first_read_fails_the_others_read_on_their_own() -> None:
    cache = IdentityCache()
    read = _RoleReads("member")
    read.fail = True
    first = asyncio.create_task(cache.read_role("usr_1", "org_1", read))
    await asyncio.sleep(0)
    others = [asyncio.create_task(cache.read_role("usr_1", "org_1", read)) for _ in range(3)]
    await asyncio.sleep(0)
    read.release.set()
    with pytest.raises(ConnectionError):
        await first
    read.fail = False
    # They took the first read's failure as "read yourselves" (one of them may meanwhile fail too).
    results = await asyncio.gather(*others, return_exceptions=True)
    assert all(result == "member" or isinstance(result, ConnectionError) for result in results)
    assert read.count >= 2


async def test_a_caller_that_gives_up_does_not_cancel_the_read_the_others_wait_for() -> None:
    cache = IdentityCache()
    read = _RoleReads("owner")
    first = asyncio.create_task(cache.read_role("usr_1", "org_1", read))
    await asyncio.sleep(0)
    impatient = asyncio.create_task(cache.read_role("usr_1", "org_1", read))
    patient = asyncio.create_task(cache.read_role("usr_1", "org_1", read))
    await asyncio.sleep(0)
    impatient.cancel()
    read.release.set()
    assert await first == "owner"
    assert await patient == "owner"
    with pytest.raises(asyncio.CancelledError):
        await impatient
    assert read.count == 1


async def test_concurrent_requests_of_a_user_whose_entry_expired_read_the_row_once(
    tmp_path: Any, committed_url: str
) -> None:
    async with committed_app(tmp_path, committed_url) as (client, database, app):
        org = await create_org(client)
        headers = auth(ALICE, str(org["id"]))
        assert (await client.get("/api/api-keys", headers=headers)).status_code == 200
        user_reads: list[str] = []

        def note(_connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if "FROM users" in statement:
                user_reads.append(statement)

        event.listen(database.engine.sync_engine, "before_cursor_execute", note)
        try:
            app.state.known_users._entries.clear()  # as when the entries' minute ran out
            answers = await asyncio.gather(*(client.get("/api/api-keys", headers=headers) for _ in range(12)))
        finally:
            event.remove(database.engine.sync_engine, "before_cursor_execute", note)
        assert [answer.status_code for answer in answers] == [200] * 12
        assert len(user_reads) == 1, user_reads


async def test_concurrent_requests_with_a_key_whose_entry_expired_read_it_and_note_its_use_once(
    tmp_path: Any, committed_url: str
) -> None:
    """Twelve requests with one API key, its cache entry gone and its use due to be noted: one reads
    the ``api_keys`` row and writes ``last_used_at``; the others take its answer (no burst of reads and
    writes of one row each time the entry's lifetime runs out)."""
    async with committed_app(tmp_path, committed_url) as (client, database, app):
        org = await create_org(client)
        owner = auth(ALICE, str(org["id"]))
        key_id, secret = await _key(client, owner, ["read"])
        statements: list[str] = []

        def note(_connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if "api_keys" in statement:
                statements.append(" ".join(statement.split()).upper())

        event.listen(database.engine.sync_engine, "before_cursor_execute", note)
        try:
            app.state.identity_cache.clear()  # as when the entry's lifetime ran out
            key = {"Authorization": f"Bearer {secret}"}
            answers = await asyncio.gather(*(client.get("/api/me", headers=key) for _ in range(12)))
        finally:
            event.remove(database.engine.sync_engine, "before_cursor_execute", note)
        assert [answer.status_code for answer in answers] == [200] * 12
        reads = [s for s in statements if s.startswith("SELECT") and "FROM API_KEYS" in s]
        writes = [s for s in statements if s.startswith("UPDATE API_KEYS")]
        assert (len(reads), len(writes)) == (1, 1), statements
        noted = await client.get(f"/api/api-keys/{key_id}", headers=owner)
        assert noted.json()["last_used_at"] is not None  # the one write was committed
        assert app.state.identity_cache.key(key_id) is not None  # and the next request reads no row
