"""JSON columns are written and read with orjson, and keep what the standard library kept: integers of
any size, keys that are not strings (as strings), and legacy text orjson refuses (``NaN``)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import JSON, Column, Integer, MetaData, Table, insert, select, text

from parley.kit.db import dumps_json, loads_json

VALUES: list[Any] = [
    {"order": {"id": 12, "cost": 1234.5, "status": "fertig", "note": "Größe ✓"}, "list": [1, None, True]},
    {"beyond_64_bits": 2**70, "negative": -(2**63), "largest_unsigned": 2**64 - 1},
    {"digits_in_text": "12345678901234567890123", "float": 0.1},
    [],
    "plain",
]


def test_values_come_back_as_they_were_written() -> None:
    for value in VALUES:
        assert loads_json(dumps_json(value)) == value
    assert loads_json(dumps_json({1: "one"})) == {"1": "one"}  # as json.dumps writes int keys


def test_text_the_standard_library_wrote_is_still_read() -> None:
    legacy = loads_json('{"score": NaN, "big": 123456789012345678901234567890}')
    assert math.isnan(legacy["score"]) and legacy["big"] == 123456789012345678901234567890


async def test_a_json_column_round_trips_through_the_database(engine: Any) -> None:
    table = Table("json_round_trip", MetaData(), Column("id", Integer, primary_key=True), Column("v", JSON))
    async with engine.begin() as connection:
        await connection.run_sync(table.create)
    try:
        async with engine.begin() as connection:
            await connection.execute(insert(table), [{"id": i, "v": v} for i, v in enumerate(VALUES)])
            await connection.execute(
                text("INSERT INTO json_round_trip (id, v) VALUES (99, :raw)"),
                {"raw": '{"big": 123456789012345678901234567890}'},
            )
            rows = (await connection.execute(select(table.c.id, table.c.v).order_by(table.c.id))).all()
        read = dict(rows)
        assert [read[i] for i in range(len(VALUES))] == VALUES
        assert read[99] == {"big": 123456789012345678901234567890}
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(table.drop)
