"""Reading dataset items from CSV (``,`` or ``;``, BOM, UTF-8 or Windows-1252) or JSONL files."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

import orjson

from parley.datasets.schemas import MAX_ITEM_BYTES


@dataclass
class ParsedFile:
    format: str
    rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (line, data)
    errors: list[tuple[int, str]] = field(default_factory=list)


def decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", "replace")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", "replace")


def _too_big(data: dict[str, Any]) -> str | None:
    size = len(orjson.dumps(data))
    if size > MAX_ITEM_BYTES:
        return f"the item has {size} bytes of JSON; at most {MAX_ITEM_BYTES} are allowed"
    return None


def parse_jsonl(text: str) -> ParsedFile:
    parsed = ParsedFile("jsonl")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            parsed.errors.append((number, f"not valid JSON ({exc.msg})"))
            continue
        if not isinstance(value, dict):
            parsed.errors.append((number, f"a JSON object is expected, not {type(value).__name__}"))
            continue
        if (problem := _too_big(value)) is not None:
            parsed.errors.append((number, problem))
            continue
        parsed.rows.append((number, value))
    return parsed


def _delimiter(text: str) -> str:
    header = text.split("\n", 1)[0]
    try:
        return csv.Sniffer().sniff(text[:4096], delimiters=",;\t").delimiter
    except csv.Error:
        return ";" if header.count(";") > header.count(",") else ","


def parse_csv(text: str) -> ParsedFile:
    parsed = ParsedFile("csv")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        parsed.errors.append((1, "the file has no header row"))
        return parsed
    names = [name.strip() for name in header]
    if not any(names) or len(set(names)) != len(names) or "" in names:
        parsed.errors.append((1, "the header row needs unique, non-empty column names"))
        return parsed
    line = reader.line_num
    while True:
        start = line + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            parsed.errors.append((start, f"the row cannot be read ({exc})"))
            break
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(names):
            parsed.errors.append((start, f"the row has {len(row)} fields, the header has {len(names)}"))
            continue
        data = dict(zip(names, row, strict=True))
        if (problem := _too_big(data)) is not None:
            parsed.errors.append((start, problem))
            continue
        parsed.rows.append((start, data))
    return parsed


def parse_file(data: bytes, filename: str | None) -> ParsedFile:
    """JSONL when the name says so or the first character is ``{``; CSV otherwise."""
    text = decode(data)
    name = (filename or "").lower()
    if name.endswith((".jsonl", ".ndjson")) or (not name.endswith(".csv") and text.lstrip().startswith("{")):
        return parse_jsonl(text)
    return parse_csv(text)
