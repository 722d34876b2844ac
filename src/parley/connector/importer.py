"""Import of a shop system's order export (CSV, JSON or JSONL) into the connector's database.

All or nothing: the whole file is read and validated inside one transaction; when any record is bad
the transaction is rolled back and the database stays exactly as it was, unless ``skip_invalid`` is
set, in which case the good records are upserted (by id) and every bad one is reported with its line.
Files are streamed (CSV, JSONL), so memory stays flat for large exports.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import orjson
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from parley.connector.errors import ConnectorUsageError
from parley.connector.fields import RowInvalid, convert_record
from parley.connector.repository import existing_ids, order_row, upsert_orders
from parley.connector.schemas import FIELD_NAMES

BATCH_SIZE = 500
MAX_REPORTED_ERRORS = 200
_DELIMITERS = (";", ",", "\t", "|")

ProgressCallback = Callable[[int, int], None]  # (bytes done, bytes total)


class ImportFormat(StrEnum):
    CSV = "csv"
    JSON = "json"
    JSONL = "jsonl"


@dataclass(frozen=True, slots=True)
class RowError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class ImportReport:
    path: str
    format: ImportFormat
    encoding: str = "utf-8"
    delimiter: str | None = None
    records: int = 0
    inserted: int = 0
    updated: int = 0
    invalid: int = 0
    committed: bool = False
    errors: list[RowError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add_error(self, line: int, message: str) -> None:
        self.invalid += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(RowError(line, message))


class ImportFailed(ConnectorUsageError):
    """The file was rejected as a whole; nothing was written. ``report`` lists the problems."""

    def __init__(self, message: str, report: ImportReport) -> None:
        super().__init__(message)
        self.report = report


class _CountingReader(io.RawIOBase):
    """Counts the bytes read from a binary file, for the progress bar of streamed formats."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        self.count += len(data)
        return len(data)


def detect_format(path: Path, explicit: ImportFormat | None) -> ImportFormat:
    if explicit is not None:
        return explicit
    suffix = path.suffix.lower().lstrip(".")
    aliases = {"csv": ImportFormat.CSV, "txt": ImportFormat.CSV, "json": ImportFormat.JSON}
    aliases |= {"jsonl": ImportFormat.JSONL, "ndjson": ImportFormat.JSONL}
    if suffix not in aliases:
        raise ConnectorUsageError(
            f"Cannot tell the format of {path.name!r} from its extension; pass --format csv|json|jsonl."
        )
    return aliases[suffix]


def detect_encoding(path: Path) -> str:
    """UTF-8 (with or without BOM) when the whole file decodes as such, else Windows-1252.

    Excel on German Windows still writes CP1252 by default; umlauts must survive either way.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as raw:
        try:
            while chunk := raw.read(1 << 20):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return "cp1252"
    return "utf-8-sig"


def sniff_delimiter(header_line: str) -> str:
    """The header names contain no separators, so the most frequent candidate in it is the one."""
    counts = {d: header_line.count(d) for d in _DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _read_csv(
    path: Path, report: ImportReport, progress: ProgressCallback | None
) -> Iterator[tuple[int, dict[str, str]]]:
    total = path.stat().st_size
    with path.open("rb") as binary:
        counter = _CountingReader(binary)
        text = io.TextIOWrapper(io.BufferedReader(counter), encoding=report.encoding, newline="")
        header_line = text.readline()
        if not header_line.strip():
            raise ImportFailed("The CSV file is empty: expected a header line with the field names.", report)
        delimiter = sniff_delimiter(header_line)
        report.delimiter = delimiter
        header = [h.strip().lower() for h in next(csv.reader([header_line], delimiter=delimiter))]
        _check_columns(header, report)
        reader = csv.reader(text, delimiter=delimiter)
        line = 2  # the physical line where the next record starts
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:  # e.g. an unclosed quote or a cell beyond the size limit
                raise ImportFailed(f"line {line}: unreadable CSV ({exc})", report) from None
            start, line = line, reader.line_num + 2
            if progress:
                progress(counter.count, total)
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                report.add_error(start, f"has {len(cells)} cells but the header has {len(header)} columns")
                report.records += 1
                continue
            yield start, dict(zip(header, cells, strict=True))


def _check_columns(header: Sequence[str], report: ImportReport) -> None:
    duplicates = sorted({h for h in header if header.count(h) > 1})
    if duplicates:
        raise ImportFailed(f"The header names these columns more than once: {', '.join(duplicates)}.", report)
    missing = [name for name in FIELD_NAMES if name not in header]
    if missing:
        raise ImportFailed(
            f"The header lacks {len(missing)} order field(s): {', '.join(missing)}. "
            "Column names are the spec's Order field names.",
            report,
        )
    unknown = [h for h in header if h not in FIELD_NAMES]
    if unknown:
        report.notes.append(f"Ignored unknown column(s): {', '.join(unknown)}.")


def _read_jsonl(
    path: Path, report: ImportReport, progress: ProgressCallback | None
) -> Iterator[tuple[int, Any]]:
    total = path.stat().st_size
    done = 0
    with path.open("r", encoding=report.encoding, newline="") as text:
        for number, line in enumerate(text, start=1):
            done += len(line.encode(report.encoding, "replace"))
            if progress and number % 200 == 0:
                progress(done, total)
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                report.records += 1
                report.add_error(number, f"invalid JSON ({exc.msg} at column {exc.colno})")
    if progress:
        progress(total, total)


def _read_json(
    path: Path, report: ImportReport, progress: ProgressCallback | None
) -> Iterator[tuple[int, Any]]:
    """Walk the top-level array element by element to know each record's line."""
    text = path.read_text(encoding=report.encoding)
    decoder = json.JSONDecoder()
    size = len(text)

    def skip(pos: int) -> int:
        while pos < size and text[pos] in " \t\r\n":
            pos += 1
        return pos

    def fail(pos: int, message: str) -> ImportFailed:
        line = text.count("\n", 0, pos) + 1
        return ImportFailed(f"line {line}: {message}", report)

    pos = skip(0)
    if pos >= size or text[pos] != "[":
        raise fail(pos, "a JSON import file holds one array of order objects")
    pos, line, counted_to = skip(pos + 1), 1, 0
    while pos < size and text[pos] != "]":
        line += text.count("\n", counted_to, pos)
        counted_to = pos
        try:
            record, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ImportFailed(f"line {exc.lineno}: invalid JSON ({exc.msg})", report) from None
        yield line, record
        if progress:
            progress(end, size)
        pos = skip(end)
        if pos < size and text[pos] == ",":
            pos = skip(pos + 1)
        elif pos >= size or text[pos] != "]":
            raise fail(pos, "expected ',' or ']' after an order object")
    if pos >= size:
        raise fail(pos, "the array is not closed with ']'")


def _prepare(path: Path, fmt: ImportFormat | None, encoding: str | None) -> ImportReport:
    if not path.is_file():
        raise ConnectorUsageError(f"No such file: {path}")
    report = ImportReport(path=str(path), format=detect_format(path, fmt))
    report.encoding = encoding or detect_encoding(path)
    if report.encoding == "cp1252":
        report.notes.append("The file is not UTF-8; read it as Windows-1252 (Excel's default).")
    return report


async def import_file(
    engine: AsyncEngine,
    path: Path,
    *,
    fmt: ImportFormat | None = None,
    skip_invalid: bool = False,
    encoding: str | None = None,
    progress: ProgressCallback | None = None,
) -> ImportReport:
    """Import ``path``; raise :class:`ImportFailed` (nothing written) when the file has bad records
    and ``skip_invalid`` is false."""
    report = _prepare(path, fmt, encoding)
    readers = {ImportFormat.CSV: _read_csv, ImportFormat.JSON: _read_json, ImportFormat.JSONL: _read_jsonl}
    records: Iterator[tuple[int, Any]] = readers[report.format](path, report, progress)

    seen: dict[int, int] = {}  # id -> line of its first record
    batch: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    try:
        async with engine.connect() as conn:
            transaction = await conn.begin()
            try:

                async def flush() -> None:
                    present = await existing_ids(conn, [row["id"] for row in batch])
                    await upsert_orders(conn, batch)
                    report.updated += len(present)
                    report.inserted += len(batch) - len(present)
                    batch.clear()

                for line, raw in records:
                    report.records += 1
                    if not isinstance(raw, dict):
                        report.add_error(line, f"expected an order object, got {type(raw).__name__}")
                        continue
                    try:
                        order = convert_record(raw, textual=report.format is ImportFormat.CSV)
                        row = order_row(order, now)
                    except RowInvalid as exc:
                        report.add_error(line, str(exc))
                        continue
                    except orjson.JSONEncodeError:
                        report.add_error(line, "insurance_json/costs_json hold a value JSON cannot carry")
                        continue
                    if b"\\u0000" in row["payload"]:
                        report.add_error(line, "contains a NUL character")
                        continue
                    first = seen.setdefault(order["id"], line)
                    if first != line:
                        report.add_error(line, f"duplicate id {order['id']} (first on line {first})")
                        continue
                    if report.invalid and not skip_invalid:
                        continue  # keep validating to report every problem, but write nothing more
                    batch.append(row)
                    if len(batch) >= BATCH_SIZE:
                        await flush()
                if report.invalid and not skip_invalid:
                    raise ImportFailed(
                        f"{report.invalid} invalid record(s); nothing was imported "
                        "(fix them, or pass --skip-invalid to import the valid ones).",
                        report,
                    )
                if batch:
                    await flush()
                await transaction.commit()
                report.committed = True
            finally:
                if transaction.is_active:
                    await transaction.rollback()
    except UnicodeDecodeError as exc:
        raise ImportFailed(f"The file is not valid {report.encoding} text ({exc.reason}).", report) from None
    except SQLAlchemyError as exc:
        raise ImportFailed(
            f"The database rejected the import ({type(exc).__name__}); nothing was imported.", report
        ) from None
    return report
