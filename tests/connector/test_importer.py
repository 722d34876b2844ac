"""Import of shop exports on SQLite and PostgreSQL: formats, German Excel quirks, errors, atomicity."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from parley.connector.config import ConnectorSettings
from parley.connector.db import engine_scope
from parley.connector.demo import generate_orders
from parley.connector.importer import ImportFailed, ImportFormat, ImportReport, import_file
from parley.connector.models import orders
from parley.connector.schemas import FIELD_NAMES
from tests import pg
from tests.connector.conftest import fresh_database, make_settings

REFERENCE = date(2025, 3, 10)


@pytest.fixture(scope="module", params=["sqlite", pg.ENGINE_NAME])
def import_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnectorSettings]:
    tmp = tmp_path_factory.mktemp(f"import-{request.param}")
    url, cleanup = fresh_database(request.param, tmp)
    try:
        yield make_settings(url, tmp)
    finally:
        cleanup()


@pytest.fixture
def db(import_db: ConnectorSettings) -> ConnectorSettings:
    """The module's database, emptied before each test."""

    async def clear() -> None:
        async with engine_scope(import_db) as engine, engine.begin() as conn:
            await conn.execute(orders.delete())

    asyncio.run(clear())
    return import_db


def stored(settings: ConnectorSettings) -> dict[int, dict[str, Any]]:
    """Every stored order as its served payload (what a client would receive)."""

    async def read() -> dict[int, dict[str, Any]]:
        async with engine_scope(settings) as engine, engine.connect() as conn:
            rows = await conn.execute(sa.select(orders.c.id, orders.c.payload, orders.c.city))
            result = {}
            for row in rows:
                payload = orjson.loads(row.payload)
                assert payload["city"] == row.city  # typed columns and payload agree
                result[int(row.id)] = payload
            return result

    return asyncio.run(read())


def run_import(settings: ConnectorSettings, path: Path, **options: Any) -> ImportReport:
    async def go() -> ImportReport:
        async with engine_scope(settings) as engine:
            return await import_file(engine, path, **options)

    return asyncio.run(go())


def demo(count: int, start: int = 1) -> list[dict[str, Any]]:
    return list(generate_orders(count, seed=5, start_id=start, reference=REFERENCE))


def german_cell(name: str, value: Any) -> str:
    """How a German Excel export writes a value: decimal commas, dd.mm.yyyy dates, JSON as text."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:.2f}".replace(".", ",")
    if name in {"shop_date", "repair_date", "finish_date", "planned_delivery_date"}:
        year, month, day = value.split("-")
        return f"{day}.{month}.{year}"
    return str(value)


def write_csv(
    path: Path,
    rows: list[dict[str, Any]],
    *,
    delimiter: str = ";",
    encoding: str = "utf-8-sig",
    german: bool = True,
    columns: list[str] | None = None,
) -> Path:
    columns = columns or list(FIELD_NAMES)
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            [
                german_cell(c, row.get(c))
                if german
                else json.dumps(row[c])
                if isinstance(row.get(c), dict)
                else ""
                if row.get(c) is None
                else str(row.get(c))
                for c in columns
            ]
        )
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


def test_german_excel_csv_round_trips_exactly(db: ConnectorSettings, tmp_path: Path) -> None:
    originals = demo(25)
    path = write_csv(tmp_path / "auftraege.csv", originals)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    report = run_import(db, path)
    assert (report.delimiter, report.encoding, report.inserted, report.updated) == (";", "utf-8-sig", 25, 0)
    assert stored(db) == {o["id"]: o for o in originals}


def test_windows_1252_umlauts_survive(db: ConnectorSettings, tmp_path: Path) -> None:
    originals = demo(5)
    originals[0]["city"] = "Düsseldorf"
    originals[0]["remarks"] = "Größere Delle, Kunde möchte Rückruf"
    path = write_csv(tmp_path / "export.csv", originals, encoding="cp1252")
    report = run_import(db, path)
    assert report.encoding == "cp1252"
    assert any("Windows-1252" in note for note in report.notes)
    assert stored(db)[1]["remarks"] == "Größere Delle, Kunde möchte Rückruf"
    assert stored(db)[1]["city"] == "Düsseldorf"


@pytest.mark.parametrize("delimiter", [",", "\t", "|"])
def test_delimiter_is_sniffed(db: ConnectorSettings, tmp_path: Path, delimiter: str) -> None:
    originals = demo(4)
    path = write_csv(tmp_path / "plain.csv", originals, delimiter=delimiter, encoding="utf-8", german=False)
    report = run_import(db, path)
    assert report.delimiter == delimiter
    assert stored(db) == {o["id"]: o for o in originals}


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_json_and_jsonl_round_trip(db: ConnectorSettings, tmp_path: Path, fmt: str) -> None:
    originals = demo(10)
    path = tmp_path / f"orders.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(originals, indent=2, ensure_ascii=False), encoding="utf-8")
    else:
        path.write_text("\n".join(json.dumps(o) for o in originals) + "\n", encoding="utf-8")
    report = run_import(db, path)
    assert report.inserted == 10
    assert stored(db) == {o["id"]: o for o in originals}


def test_upsert_updates_existing_ids(db: ConnectorSettings, tmp_path: Path) -> None:
    originals = demo(3)
    run_import(db, write_csv(tmp_path / "a.csv", originals))
    changed = [dict(originals[1], project_status="Fertig", total_net_cost=100.0, total_gross_cost=119.0)]
    changed += demo(1, start=4)
    report = run_import(db, write_csv(tmp_path / "b.csv", changed))
    assert (report.inserted, report.updated) == (1, 1)
    data = stored(db)
    assert len(data) == 4
    assert data[2]["project_status"] == "Fertig" and data[2]["total_gross_cost"] == 119.0
    assert data[1] == originals[0]


def test_bad_rows_abort_the_whole_file_and_keep_the_data(db: ConnectorSettings, tmp_path: Path) -> None:
    before = demo(3)
    run_import(db, write_csv(tmp_path / "seed.csv", before))
    rows = demo(4, start=2)  # id 2 and 3 would be updated, 4 and 5 inserted
    rows[0]["station_id"] = "zwei"
    rows[1]["missing_parts"] = "1,5"
    rows[2]["shop_date"] = "31.02.2025"  # written as-is: not a calendar date
    rows[3]["est_hours_karo"] = "viel"
    path = write_csv(tmp_path / "bad.csv", rows, german=False, delimiter=",")
    with pytest.raises(ImportFailed) as failed:
        run_import(db, path)
    errors = [str(e) for e in failed.value.report.errors]
    assert errors == [
        "line 2: station_id: expected an integer, got 'zwei'",
        "line 3: missing_parts: expected an integer, got '1,5'",
        "line 4: shop_date: is not a valid calendar date: '31.02.2025'",
        "line 5: est_hours_karo: expected a number, got 'viel'",
    ]
    assert "nothing was imported" in str(failed.value)
    assert stored(db) == {o["id"]: o for o in before}


def test_skip_invalid_imports_the_good_rows(db: ConnectorSettings, tmp_path: Path) -> None:
    rows = demo(4)
    rows[2]["id"] = "drei"
    report = run_import(
        db, write_csv(tmp_path / "mixed.csv", rows, german=False, delimiter=","), skip_invalid=True
    )
    assert (report.inserted, report.invalid) == (3, 1)
    assert [str(e) for e in report.errors] == ["line 4: id: expected an integer, got 'drei'"]
    assert sorted(stored(db)) == [1, 2, 4]


def test_duplicate_ids_in_a_file_are_reported_with_both_lines(db: ConnectorSettings, tmp_path: Path) -> None:
    rows = demo(3)
    rows.append(dict(rows[0]))
    with pytest.raises(ImportFailed) as failed:
        run_import(db, write_csv(tmp_path / "dup.csv", rows))
    assert [str(e) for e in failed.value.report.errors] == ["line 5: duplicate id 1 (first on line 2)"]
    assert stored(db) == {}
    report = run_import(db, write_csv(tmp_path / "dup.csv", rows), skip_invalid=True)
    assert report.inserted == 3 and report.invalid == 1


def test_missing_columns_are_named(db: ConnectorSettings, tmp_path: Path) -> None:
    columns = [c for c in FIELD_NAMES if c not in {"vin", "hu_au"}] + ["werkstatt_notiz"]
    path = write_csv(tmp_path / "cols.csv", demo(2), columns=columns)
    with pytest.raises(ImportFailed, match=r"lacks 2 order field\(s\): vin, hu_au"):
        run_import(db, path)
    assert stored(db) == {}


def test_unknown_columns_are_ignored_with_a_note(db: ConnectorSettings, tmp_path: Path) -> None:
    path = tmp_path / "extra.csv"
    write_csv(path, demo(2), columns=[*FIELD_NAMES, "Bemerkung intern"])
    report = run_import(db, path)
    assert report.notes == ["Ignored unknown column(s): bemerkung intern."]
    assert report.inserted == 2


def test_multiline_cells_keep_line_numbers(db: ConnectorSettings, tmp_path: Path) -> None:
    rows = demo(3)
    rows[0]["remarks"] = "Zeile eins\nZeile zwei\nZeile drei"
    rows[1]["zu_verplanen"] = "ja"
    with pytest.raises(ImportFailed) as failed:
        run_import(db, write_csv(tmp_path / "multi.csv", rows))
    assert [str(e) for e in failed.value.report.errors] == [
        "line 5: zu_verplanen: expected an integer, got 'ja'"
    ]
    rows[1]["zu_verplanen"] = 0
    run_import(db, write_csv(tmp_path / "multi.csv", rows))
    assert stored(db)[1]["remarks"] == "Zeile eins\nZeile zwei\nZeile drei"


def test_ragged_rows_and_empty_lines(db: ConnectorSettings, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "ragged.csv", demo(2))
    path.write_bytes(path.read_bytes() + b"\r\n\r\n1;2;3\r\n")
    with pytest.raises(ImportFailed) as failed:
        run_import(db, path)
    assert [str(e) for e in failed.value.report.errors] == [
        f"line 6: has 3 cells but the header has {len(FIELD_NAMES)} columns"
    ]


def test_json_errors_carry_line_numbers(db: ConnectorSettings, tmp_path: Path) -> None:
    rows: list[Any] = demo(3)
    rows[1] = dict(rows[1], total_net_cost="teuer", vin=12.5)
    rows.append("not an object")
    path = tmp_path / "orders.json"
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    text = path.read_text()
    second = text[: text.index('"id": 2')].count("\n")  # the line of the opening brace of record 2
    with pytest.raises(ImportFailed) as failed:
        run_import(db, path)
    errors = [str(e) for e in failed.value.report.errors]
    assert (
        errors[0]
        == f"line {second}: total_net_cost: expected a number, got 'teuer'; vin: expected a string, got float"
    )
    assert errors[1].endswith("expected an order object, got str")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": 1}', "line 1: a JSON import file holds one array of order objects"),
        ('[\n{"id": 1},\n{"id": ', "line 3: invalid JSON"),
        ('[{"id": 1} {"id": 2}]', "line 1: expected ',' or ']' after an order object"),
        ("", "line 1: a JSON import file holds one array of order objects"),
    ],
)
def test_malformed_json_files(db: ConnectorSettings, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ImportFailed, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_import(db, path)


def test_jsonl_bad_line_is_reported(db: ConnectorSettings, tmp_path: Path) -> None:
    originals = demo(3)
    lines = [json.dumps(o) for o in originals]
    lines.insert(1, "{not json")
    path = tmp_path / "orders.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    report = run_import(db, path, skip_invalid=True)
    assert [str(e) for e in report.errors] == [
        "line 2: invalid JSON (Expecting property name enclosed in double quotes at column 2)"
    ]
    assert report.inserted == 3


def test_empty_and_unknown_files(db: ConnectorSettings, tmp_path: Path) -> None:
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(ImportFailed, match="empty"):
        run_import(db, tmp_path / "empty.csv")
    (tmp_path / "orders.xlsx").write_bytes(b"PK")
    with pytest.raises(Exception, match="--format"):
        run_import(db, tmp_path / "orders.xlsx")
    with pytest.raises(Exception, match="No such file"):
        run_import(db, tmp_path / "nope.csv")
    report = run_import(db, write_csv(tmp_path / "header-only.csv", []), fmt=ImportFormat.CSV)
    assert report.records == 0 and report.inserted == 0


def test_nul_characters_and_out_of_range_integers_are_row_errors(
    db: ConnectorSettings, tmp_path: Path
) -> None:
    rows = demo(3)
    rows[0]["remarks"] = "a\x00b"
    rows[1]["station_id"] = 2**40
    rows[2]["id"] = 2**63
    path = tmp_path / "edge.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    with pytest.raises(ImportFailed) as failed:
        run_import(db, path)
    assert [str(e) for e in failed.value.report.errors] == [
        "line 1: remarks: contains a NUL character",
        "line 2: station_id: out of range for a 32-bit integer",
        f"line 3: id: must be between 1 and {2**63 - 1}, got {2**63}",
    ]
