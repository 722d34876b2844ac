"""The call list reads only the summary columns and renders them itself: it must answer exactly the bytes
the response model would, and never another organization's calls."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, text

from parley.calls.filters import CallFilters
from parley.calls.models import Call
from parley.calls.schemas import CallSummaryOut
from parley.calls.service import _list_statement, record_call, store_analysis
from parley.kit.db import Database
from parley.kit.pagination import Page, encode_cursor
from parley.kit.responses import JSONBytesResponse
from tests import migrated
from tests.calls.conftest import Recorder
from tests.calls.helpers import START, flow_signal, make_record
from tests.conftest import auth
from tests.kit.test_read_first import Counts
from tests.organizations.test_router import ALICE, BOB, create_org


async def _as_the_model_renders(database: Database, organization_id: str, limit: int) -> bytes:
    """The page as the route rendered it before: whole ORM rows validated into the response model."""
    async with database.sessionmaker() as session:
        calls = (
            await session.scalars(
                select(Call).where(Call.organization_id == organization_id).order_by(Call.id.desc())
            )
        ).all()
    items = [CallSummaryOut.model_validate(call) for call in calls[:limit]]
    cursor = encode_cursor(calls[limit - 1].id) if len(calls) > limit else None
    return JSONBytesResponse(
        Page[CallSummaryOut](items=items, next_cursor=cursor).model_dump(mode="json")
    ).body


async def test_the_list_answers_the_response_models_bytes(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    org = str((await create_org(client))["id"])
    await record(org, started_at=START)  # whole seconds: no fraction in the JSON
    await record(
        org,
        started_at=START + timedelta(minutes=5, microseconds=123_456),
        channel="web",
        caller=None,
        outcome="abandoned",
        signals=[flow_signal()],
        turn_metrics=[],  # a text call: null mean latency
        recording_filename="list-1.wav",
    )
    analysed = await record(
        org, started_at=START + timedelta(minutes=9, microseconds=7), outcome="transferred"
    )
    async with database.sessionmaker() as session:
        call = await session.get_one(Call, analysed.id)
        store_analysis(
            call,
            summary='Inbound phone call, "Rückruf" erbeten — 1 min 35 s.',
            extracted={"callback_requested": True, "preferred_time": "morgen um 10", "attempts": 2.5},
            method="variables",
        )
        await session.commit()

    for route in ("/api/calls", "/api/monitoring/calls/history"):
        for limit in (2, 50):
            response = await client.get(route, params={"limit": limit}, headers=auth(ALICE, org))
            assert response.status_code == 200, response.text
            assert response.headers["content-type"] == "application/json"
            assert response.content == await _as_the_model_renders(database, org, limit), (route, limit)


async def test_pages_never_show_another_organizations_calls(
    client: httpx.AsyncClient, record: Recorder
) -> None:
    ours = str((await create_org(client))["id"])
    theirs = str((await create_org(client, BOB, name="Bob's Garage"))["id"])
    mine: list[str] = []
    for minute in range(6):  # interleaved in id order with the other organization's
        at = START + timedelta(minutes=minute)
        mine.append((await record(ours, started_at=at, caller="+4930111")).id)
        await record(theirs, started_at=at + timedelta(seconds=30), caller="+4930111")

    async def walk(**params: str) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            query = {"limit": "4", **params, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/api/calls", params=query, headers=auth(ALICE, ours))).json()
            seen += [item["id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen

    assert await walk() == mine[::-1]
    assert await walk(caller="+4930111") == mine[::-1]  # the (organization, caller, id) index's path
    assert await walk(outcome="completed") == mine[::-1]
    assert await walk(caller="+4930222") == []


async def test_every_filter_and_cursor_finds_the_calls_it_names(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    """Each filter, alone, combined and again with other values (a statement is built once per set of
    filters and reused with new values), walked page by page, lists exactly the organization's calls
    that match, newest first."""
    ours = str((await create_org(client))["id"])
    theirs = str((await create_org(client, BOB, name="Bob's Garage"))["id"])
    kinds = [
        {"flow_id": "flow_01A", "channel": "phone", "outcome": "completed", "caller": "+4930111"},
        {"flow_id": "flow_01B", "channel": "web", "caller": None, "outcome": "abandoned"},
        {"flow_id": "flow_01A", "channel": "phone", "direction": "outbound", "caller": "+4930222"},
        {"flow_id": "flow_01B", "channel": "whatsapp", "outcome": "abandoned", "caller": "+4930111"},
    ]
    calls: list[Call] = []
    for index in range(12):
        at = START + timedelta(minutes=index)
        kind = kinds[index % len(kinds)]
        signals = [flow_signal("vip_customer" if index % 2 else "callback", at=at)] if index % 3 == 0 else []
        calls.append(await record(ours, started_at=at, signals=signals, **kind))
        await record(theirs, started_at=at + timedelta(seconds=30), signals=signals, **kind)
    async with database.sessionmaker() as session:
        analysed = await session.get_one(Call, calls[4].id)
        store_analysis(analysed, summary="s", extracted={"callback_requested": True}, method="variables")
        await session.commit()

    async def walk(params: dict[str, str]) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:
            query = {"limit": "2", **params, **({"cursor": cursor} if cursor else {})}
            response = await client.get("/api/calls", params=query, headers=auth(ALICE, ours))
            assert response.status_code == 200, (params, response.text)
            page = response.json()
            seen += [item["id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen

    at = START + timedelta(minutes=3)
    cases: list[tuple[dict[str, str], list[Call]]] = [
        ({}, calls),
        ({"since": at.isoformat()}, [c for c in calls if c.started_at >= at]),
        ({"until": at.isoformat()}, [c for c in calls if c.started_at < at]),
        ({"flow_id": "flow_01A"}, [c for c in calls if c.flow_id == "flow_01A"]),
        ({"flow_id": "flow_01B"}, [c for c in calls if c.flow_id == "flow_01B"]),
        ({"channel": "web"}, [c for c in calls if c.channel == "web"]),
        ({"outcome": "abandoned"}, [c for c in calls if c.outcome == "abandoned"]),
        ({"outcome": "completed"}, [c for c in calls if c.outcome == "completed"]),
        ({"direction": "outbound"}, [c for c in calls if c.direction == "outbound"]),
        ({"caller": "+4930111"}, [c for c in calls if c.caller == "+4930111"]),
        ({"caller": "+4930222"}, [c for c in calls if c.caller == "+4930222"]),
        ({"has_signal": "true"}, [c for c in calls if c.has_signals]),
        ({"has_signal": "false"}, [c for c in calls if not c.has_signals]),
        ({"signal_type": "callback"}, [c for c in calls if "callback" in c.signal_types]),
        ({"signal_type": "vip_customer"}, [c for c in calls if "vip_customer" in c.signal_types]),
        ({"analysis.callback_requested": "true"}, [calls[4]]),
        (
            {"outcome": "abandoned", "caller": "+4930111"},
            [c for c in calls if c.outcome == "abandoned" and c.caller == "+4930111"],
        ),
        (
            {"since": at.isoformat(), "flow_id": "flow_01B", "outcome": "abandoned", "caller": "+4930111"},
            [c for c in calls if c.started_at >= at and c.flow_id == "flow_01B" and c.caller == "+4930111"],
        ),
        (
            {"until": (START + timedelta(minutes=10)).isoformat(), "has_signal": "true", "channel": "phone"},
            [
                c
                for c in calls
                if c.has_signals and c.channel == "phone" and c.started_at < START + timedelta(minutes=10)
            ],
        ),
    ]
    assert {c.outcome for c in calls} == {"completed", "abandoned"}
    for params, expected in cases:
        assert expected, params  # every case finds something, so a wrong match cannot hide
        assert await walk(params) == [c.id for c in reversed(expected)], params
    assert await walk({"caller": "+4930333"}) == []


async def test_the_list_read_beside_the_session_answers_the_same_bytes(
    committed_platform: tuple[httpx.AsyncClient, Database],
) -> None:
    """On a database of its own (not the tests' outer transaction) a GET of the list reads its rows
    through the engine's row reader (kit.db.read_rows) from its second request on: the same bytes."""
    client, database = committed_platform
    org = str((await create_org(client))["id"])
    for minutes, outcome in ((0, "completed"), (3, "abandoned"), (7, "transferred")):
        async with database.sessionmaker() as session:
            await record_call(
                session,
                make_record(
                    org,
                    started_at=START + timedelta(minutes=minutes, microseconds=minutes * 1001),
                    outcome=outcome,
                ),
            )
            await session.commit()
    expected = await _as_the_model_renders(database, org, 2)
    answers, orm_statements = [], []
    for _ in range(3):  # the first request leaves the statement to SQLAlchemy, the next ones do not
        with Counts(database) as counts:
            response = await client.get("/api/calls?limit=2", headers=auth(ALICE, org))
        assert response.status_code == 200, response.text
        answers.append(response.content)
        orm_statements.append(counts.orm_statements)
    assert answers == [expected] * 3
    assert orm_statements[1:] == [0, 0]


async def test_the_json_columns_are_written_as_the_response_model_would_whatever_text_holds_them(
    client: httpx.AsyncClient, record: Recorder, database: Database
) -> None:
    """The list reads ``signal_types`` and ``extracted`` as the text the database holds: text another
    writer spelled differently (the standard library's spaces and escapes) still gives the model's bytes."""
    org = str((await create_org(client))["id"])
    spelled = [
        ('["callback", "vip_customer"]', '{"callback_requested": true, "name": "J\\u00fcrgen", "n": 1.50}'),
        ('["callback","vip_customer"]', '{"callback_requested":true,"name":"Jürgen","n":1.5}'),
        ("[]", "null"),
        ("[ ]", None),
    ]
    async with database.sessionmaker() as session:
        for index, (signal_types, extracted) in enumerate(spelled):
            call = await record(org, started_at=START + timedelta(minutes=index))
            await session.execute(
                text("UPDATE calls SET signal_types = :s, extracted = :e WHERE id = :id"),
                {"s": signal_types, "e": extracted, "id": call.id},
            )
        await session.commit()

    response = await client.get("/api/calls", params={"limit": 50}, headers=auth(ALICE, org))
    assert response.status_code == 200, response.text
    assert response.content == await _as_the_model_renders(database, org, 50)
    items = response.json()["items"]
    assert [item["signal_types"] for item in items] == [[], [], ["callback", "vip_customer"]] * 1 + [
        ["callback", "vip_customer"]
    ]
    assert b'"name":"J\xc3\xbcrgen","n":1.5}' in response.content


def _plan(database: Database, filters: CallFilters, after: bool) -> tuple[str, tuple[Any, ...]]:
    """SQLite's EXPLAIN QUERY PLAN of the list's statement for ``filters``, and its values in order."""
    statement = _list_statement(filters, after).compile(dialect=database.engine.dialect)
    values = {**statement.params, "organization_id": "org", "page_limit": 51, "after_id": "call_9"}
    values.update(filters.values())
    return "EXPLAIN QUERY PLAN " + str(statement), tuple(values[name] for name in statement.positiontup or ())


async def test_the_outcome_filter_walks_its_index_and_a_caller_walks_the_callers(tmp_path: Path) -> None:
    """SQLite, which has no statistics to choose by: the outcome filter walks (organization_id, outcome,
    id), with or without a cursor; with a caller as well, the caller's index, which holds few calls.
    (PostgreSQL's planner chooses by its statistics: nothing to pin there.)"""
    database = Database.from_url(migrated.sqlite_url(tmp_path / "plans.db"))
    none = CallFilters(
        since=None,
        until=None,
        flow_id=None,
        channel=None,
        outcome=None,
        caller=None,
        has_signal=None,
        signal_type=None,
    )
    cases = [
        (replace(none, outcome="abandoned"), "ix_calls_organization_id_outcome_id"),
        (replace(none, outcome="abandoned", channel="phone"), "ix_calls_organization_id_outcome_id"),
        (replace(none, outcome="abandoned", caller="+4930111"), "ix_calls_organization_id_caller_id"),
        (replace(none, caller="+4930111"), "ix_calls_organization_id_caller_id"),
        (none, "ix_calls_organization_id_id"),
    ]
    async with database.sessionmaker() as session:
        for filters, index in cases:
            for after in (False, True):
                statement, values = _plan(database, filters, after)
                connection = await session.connection()
                rows = (await connection.exec_driver_sql(statement, values)).all()
                plan = " ".join(str(row[-1]) for row in rows)
                assert f"INDEX {index} " in plan, (filters, after, plan)
    await database.dispose()
