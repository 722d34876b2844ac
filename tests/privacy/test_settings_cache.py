"""The privacy settings a turn reads are kept per organization in the process (kit/orgcache.py):
a turn that hits the cache runs no statement on ``privacy_settings``; a committed change is seen by
the next turn at once, a rolled-back one never; one organization's change leaves another's entry."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, update

from parley.kit.db import Database, unit_of_work
from parley.kit.orgcache import LOCAL_TTL, LONG_TTL, SHORT_TTL, OrgCache, org_cache_of_database
from parley.privacy.models import PrivacySettings
from parley.privacy.service import _REDACTOR
from tests.sessions.conftest import Platform, make_platform
from tests.sessions.test_router import ECHO

__all__ = ["make_platform"]

PHONE = "ruf mich an unter 0171 9876543"


@contextmanager
def statements(database: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    engine = database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def _reads_settings(seen: list[str]) -> int:
    return sum(1 for s in seen if "FROM privacy_settings" in s)


async def _caller_texts(platform: Platform, session_id: str) -> list[str]:
    state = (await platform.get(f"/api/sessions/{session_id}")).json()
    return [t["text"] for t in state["transcript"] if t["speaker"] == "caller"]


async def _redaction(platform: Platform, enabled: bool) -> None:
    response = await platform.client.patch(
        "/api/privacy/settings", json={"redaction_enabled": enabled}, headers=platform.headers
    )
    assert response.status_code == 200, response.text


async def test_a_cached_turn_reads_no_settings_and_sees_a_change_at_once(
    make_platform: Any, database: Database
) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    await platform.say(session["id"], "first")  # fills the cache if the opening did not
    with statements(database) as seen:
        await platform.say(session["id"], PHONE)
    assert _reads_settings(seen) == 0, seen  # answered from the cache
    assert (await _caller_texts(platform, session["id"]))[-1] == PHONE

    await _redaction(platform, True)  # committed: the next turn redacts
    with statements(database) as seen:
        await platform.say(session["id"], PHONE)
    assert _reads_settings(seen) == 1
    assert (await _caller_texts(platform, session["id"]))[-1] == "ruf mich an unter [phone]"

    await _redaction(platform, False)
    await platform.say(session["id"], PHONE)
    assert (await _caller_texts(platform, session["id"]))[-1] == PHONE


async def test_a_rolled_back_change_is_never_seen(make_platform: Any, database: Database) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    await platform.say(session["id"], "first")
    with pytest.raises(RuntimeError):
        async with unit_of_work(database) as writer:
            writer.add(
                PrivacySettings(
                    organization_id=platform.org,
                    redaction_enabled=True,
                    redaction_kinds=["phone"],
                    replacements={},
                    custom_patterns=[],
                    recording_notice={},
                )
            )
            await writer.flush()
            raise RuntimeError("rolled back")
    with statements(database) as seen:
        await platform.say(session["id"], PHONE)
    assert _reads_settings(seen) == 0  # the cached entry was kept: nothing committed
    assert (await _caller_texts(platform, session["id"]))[-1] == PHONE


async def test_one_organizations_change_leaves_anothers_entry(make_platform: Any, database: Database) -> None:
    first: Platform = await make_platform()
    second: Platform = await make_platform()
    sessions = [await p.start(await p.flow(ECHO)) for p in (first, second)]
    for platform, session in zip((first, second), sessions, strict=True):
        await platform.say(session["id"], "first")
    cache = org_cache_of_database(database, distributed=False)
    assert cache.get(_REDACTOR, second.org)[0]

    await _redaction(first, True)
    assert not cache.get(_REDACTOR, first.org)[0]
    assert cache.get(_REDACTOR, second.org)[0]
    await second.say(sessions[1]["id"], PHONE)
    assert (await _caller_texts(second, sessions[1]["id"]))[-1] == PHONE
    await first.say(sessions[0]["id"], PHONE)
    assert (await _caller_texts(first, sessions[0]["id"]))[-1] == "ruf mich an unter [phone]"


async def test_organization_deletion_and_bulk_statements_drop_entries(
    make_platform: Any, database: Database
) -> None:
    platform: Platform = await make_platform()
    session = await platform.start(await platform.flow(ECHO))
    await platform.say(session["id"], "first")
    cache = org_cache_of_database(database, distributed=False)
    assert cache.get(_REDACTOR, platform.org)[0]
    async with unit_of_work(database) as writer:
        await writer.execute(
            update(PrivacySettings).where(PrivacySettings.organization_id == "org_none").values()
        )
    assert not cache.get(_REDACTOR, platform.org)[0]

    await platform.say(session["id"], "again")
    assert cache.get(_REDACTOR, platform.org)[0]
    deleted = await platform.client.delete(f"/api/organizations/{platform.org}", headers=platform.headers)
    assert deleted.status_code == 200, deleted.text
    assert not cache.get(_REDACTOR, platform.org)[0]


def test_a_read_that_raced_a_change_is_not_stored_and_lifetimes_bound_other_processes() -> None:
    cache = OrgCache()
    assert cache.ttl == LOCAL_TTL == 5.0  # no Redis
    cache.distributed = True
    assert cache.ttl == SHORT_TTL == 1.0  # Redis configured, not (or no longer) subscribed
    cache.subscribed = True
    assert cache.ttl == LONG_TTL == 30.0  # other processes' changes arrive through the bus
    cache.subscribed = False
    assert cache.ttl == SHORT_TTL
    generation = cache.generation  # a turn starts reading
    cache.invalidate({(_REDACTOR, "org_1")})  # meanwhile a change commits
    cache.put(_REDACTOR, "org_1", None, generation)
    assert not cache.get(_REDACTOR, "org_1")[0]
    cache.put(_REDACTOR, "org_1", None, cache.generation)
    assert cache.get(_REDACTOR, "org_1") == (True, None)
    cache.ttl = -1.0  # an entry older than the lifetime is a miss: another process's change is read
    assert not cache.get(_REDACTOR, "org_1")[0]
