"""A request leaves no garbage in reference cycles behind (``kit.db.RequestUnit``).

Garbage in a cycle is freed only by the garbage collector, and a server that makes some per request
makes its collections frequent and long: every request in flight waits through them (the p99 of
docs/benchmarks.md, "GET by id", eleventh round). Real parts: the platform app on a migrated database
(SQLite file or PostgreSQL), as ``parley serve`` runs it, requests through ASGI. With the collector
off, each kind of request (a read, a write, a refused one, one whose handler fails with 404) must
leave no request unit alive once it has answered: reference counting alone has freed it.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from parley.kit.db import Database, RequestUnit
from tests.conftest import auth
from tests.organizations.test_router import ALICE, create_org


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _units_alive() -> int:
    return sum(1 for thing in gc.get_objects() if isinstance(thing, RequestUnit))


async def test_requests_free_their_unit_without_the_garbage_collector(
    committed_platform: tuple[httpx.AsyncClient, Database], collector_off: None
) -> None:
    client, _database = committed_platform
    org = str((await create_org(client))["id"])
    headers = auth(ALICE, org)
    created = await client.post("/api/api-keys", json={"name": "reader", "scopes": ["read"]}, headers=headers)
    assert created.status_code == 200, created.text
    path = f"/api/api-keys/{created.json()['id']}"
    assert (await client.get(path, headers=headers)).status_code == 200
    gc.collect()  # what the set-up left (the app's first requests build caches)
    before = _units_alive()

    for _ in range(3):
        assert (await client.get(path, headers=headers)).status_code == 200
        made = await client.post("/api/api-keys", json={"name": "writer"}, headers=headers)
        assert made.status_code == 200, made.text
        assert (await client.get("/api/api-keys/ak_missing", headers=headers)).status_code == 404
        assert (await client.get(path, headers=auth(ALICE, "org_elsewhere"))).status_code in {403, 404}
        assert (await client.get(path)).status_code == 401
        flows = await client.get("/api/flows", headers=headers)
        assert flows.status_code == 200, flows.text

    assert _units_alive() == before


def test_a_serving_process_settles_its_heap_and_collects_young_objects_less_often() -> None:
    """``settle_heap`` (what ``parley serve`` calls once the app is built) freezes what start-up built and
    raises the young generation's threshold; run in a process of its own, as it changes the collector."""
    code = (
        "import gc\n"
        "from parley.kit.lifecycle import YOUNG_GENERATION_THRESHOLD, settle_heap\n"
        "default = gc.get_threshold()\n"
        "settle_heap()\n"
        "print(default[1:] == gc.get_threshold()[1:], gc.get_threshold()[0] == YOUNG_GENERATION_THRESHOLD,"
        " gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["True", "True", "True"]
