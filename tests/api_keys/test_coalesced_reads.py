"""Many concurrent GETs by id and conversation turns: each answered as alone, whatever is coalesced.

On PostgreSQL, concurrent reads of a one-row statement leave as one query (``kit.postgres.PooledReader``);
each request must still get its own organization's row, another organization's id must still be 404,
and a turn must still read its session as it is. Real parts: the app as ``parley serve`` runs it on a
freshly migrated SQLite file and PostgreSQL database, with its own row readers and writers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import auth, committed_app, make_token

FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "n",
            "kind": "digits",
            "prompt": "Number?",
            "next": "again",
        },
        {
            "id": "again",
            "type": "collect",
            "variable": "m",
            "kind": "digits",
            "prompt": "And?",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Bye {{ n }} {{ m }}."},
    ],
}


async def organization(client: httpx.AsyncClient, subject: str) -> dict[str, str]:
    token = make_token(subject)
    created = await client.post("/api/organizations", json={"name": subject}, headers=auth(token))
    assert created.status_code == 200, created.text
    return auth(token, created.json()["id"])


async def keys(client: httpx.AsyncClient, headers: dict[str, str], count: int) -> dict[str, dict[str, Any]]:
    made = {}
    for index in range(count):
        response = await client.post("/api/api-keys", json={"name": f"key {index}"}, headers=headers)
        assert response.status_code == 200, response.text
        key = (await client.get(f"/api/api-keys/{response.json()['id']}", headers=headers)).json()
        made[key["id"]] = key
    return made


async def test_concurrent_gets_by_id_answer_each_organization_its_own_rows(
    tmp_path: Path, committed_url: str
) -> None:
    async with committed_app(tmp_path, committed_url) as (client, database, _app):
        alice, bob = (
            await organization(client, "coalesced-alice"),
            await organization(client, "coalesced-bob"),
        )
        alice_keys, bob_keys = await keys(client, alice, 3), await keys(client, bob, 2)
        asks = [(alice, key_id, alice_keys[key_id]) for key_id in alice_keys]
        asks += [(bob, key_id, bob_keys[key_id]) for key_id in bob_keys]
        asks += [(alice, key_id, None) for key_id in bob_keys]  # another organization's id: 404
        asks += [(bob, "key_does_not_exist", None)]
        asks *= 6
        # Every round must answer right; on PostgreSQL at least one must have shared queries (the
        # requests reach their read in the same turn of the event loop unless the machine stalls one).
        for _round in range(5):
            responses = await asyncio.gather(
                *(client.get(f"/api/api-keys/{key_id}", headers=headers) for headers, key_id, _ in asks)
            )
            for (_headers, key_id, expected), response in zip(asks, responses, strict=True):
                if expected is None:
                    assert response.status_code == 404, response.text
                    assert (
                        response.json()["detail"] == f"API key {key_id!r} was not found in this organization."
                    )
                else:
                    assert response.status_code == 200, response.text
                    assert response.json() == expected
            if database.pooled_reader is None or database.pooled_reader.queries > 0:
                break
        if database.pooled_reader is not None:  # PostgreSQL
            assert database.pooled_reader.queries > 0


async def test_concurrent_turns_each_read_their_own_session(tmp_path: Path, committed_url: str) -> None:
    async with committed_app(tmp_path, committed_url) as (client, database, _app):
        headers = await organization(client, "coalesced-turns")
        flow = (
            await client.post("/api/flows", json={"name": "T", "definition": FLOW}, headers=headers)
        ).json()
        assert (await client.post(f"/api/flows/{flow['id']}/publish", headers=headers)).status_code == 200
        sessions = [
            (await client.post("/api/sessions", json={"flow_id": flow["id"]}, headers=headers)).json()["id"]
            for _ in range(8)
        ]
        for step, expected in ((0, "And?"), (1, "Bye")):
            replies = await asyncio.gather(
                *(
                    client.post(
                        f"/api/sessions/{sid}/messages", json={"text": str(10 * n + step)}, headers=headers
                    )
                    for n, sid in enumerate(sessions)
                )
            )
            for reply in replies:
                assert reply.status_code == 200, reply.text
                assert expected in str(reply.json())
        if database.pooled_reader is not None:  # PostgreSQL: the turns' session reads shared queries
            assert database.pooled_reader.queries > 0
        for n, sid in enumerate(sessions):
            final = (await client.get(f"/api/sessions/{sid}", headers=headers)).json()
            assert final["status"] == "ended", final
            variables = final["variables"]
            assert (variables["n"], variables["m"]) == (str(10 * n), str(10 * n + 1)), final
