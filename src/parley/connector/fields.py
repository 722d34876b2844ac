"""Typed conversion of one order record from a shop system's export, with precise error messages.

Input comes either as text (CSV cells) or as JSON values (JSON/JSONL). German exports are common, so
numbers accept a decimal comma and thousands separators (``1.234,56``), and dates accept
``dd.mm.yyyy``; everything is normalized to the spec's types, date-like fields to ISO 8601.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import date, datetime
from typing import Any

from parley.connector.schemas import FIELD_KINDS, FIELD_NAMES, FieldKind

MAX_ID = 2**63 - 1
_INT32 = (-(2**31), 2**31 - 1)

_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_NUMBER_RE = re.compile(r"^[+-]?(?:[0-9]+(?:[.,][0-9]*)?|[.,][0-9]+)(?:[eE][+-]?[0-9]+)?$")
_GROUPED_RE = re.compile(r"^[+-]?[0-9]{1,3}(?:([.,' ])[0-9]{3})+(?:([.,])[0-9]+)?$")
_ISO_DATE_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_ISO_MONTH_RE = re.compile(r"^([0-9]{4})-([0-9]{2})$")
_ISO_DATETIME_RE = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?$"
)
_DE_DATE_RE = re.compile(
    r"^([0-9]{1,2})\.([0-9]{1,2})\.([0-9]{4})(?:,?\s+([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?)?$"
)
_DE_MONTH_RE = re.compile(r"^([0-9]{1,2})[./]([0-9]{4})$")


class RowInvalid(Exception):
    """A record cannot be converted; ``problems`` names each bad field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class FieldInvalid(ValueError):
    pass


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_number_text(text: str) -> float:
    """``12.5``, ``12,5``, ``1.234,56``, ``1,234.56``, ``1 234,5`` and an optional trailing ``€``."""
    cleaned = text.strip().removesuffix("€").removesuffix("EUR").strip().replace("\u00a0", " ")
    grouped = _GROUPED_RE.match(cleaned)
    if grouped and grouped.group(2) and grouped.group(1) != grouped.group(2):
        # Both separators present: the group separator repeats, the last one is the decimal mark.
        cleaned = cleaned.replace(grouped.group(1), "").replace(",", ".")
    elif grouped and grouped.group(1) in "' " and not grouped.group(2):
        cleaned = cleaned.replace(grouped.group(1), "")
    elif _NUMBER_RE.match(cleaned):
        cleaned = cleaned.replace(",", ".")
    elif grouped and grouped.group(1) in ".," and cleaned.count(grouped.group(1)) > 1:
        cleaned = cleaned.replace(grouped.group(1), "")  # 1.234.567 or 1,234,567
    else:
        raise FieldInvalid(f"expected a number, got {_describe(text)}")
    value = float(cleaned)
    if not math.isfinite(value):
        raise FieldInvalid(f"expected a finite number, got {_describe(text)}")
    return value


def to_number(value: Any, textual: bool) -> float:
    if isinstance(value, bool) or value is None:
        raise FieldInvalid(f"expected a number, got {_describe(value)}")
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise FieldInvalid(f"expected a finite number, got {_describe(value)}")
        return number
    if isinstance(value, str):
        if not value.strip():
            raise FieldInvalid("is empty, expected a number")
        return parse_number_text(value)
    raise FieldInvalid(f"expected a number, got {type(value).__name__}")


def to_integer(value: Any, textual: bool) -> int:
    if isinstance(value, bool) or value is None:
        raise FieldInvalid(f"expected an integer, got {_describe(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise FieldInvalid("is empty, expected an integer")
        if _INT_RE.match(text):
            return int(text)
        try:
            number = parse_number_text(text)  # "12,0" from a spreadsheet is still the integer 12
        except FieldInvalid:
            raise FieldInvalid(f"expected an integer, got {_describe(value)}") from None
        if number.is_integer():
            return int(number)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    raise FieldInvalid(f"expected an integer, got {_describe(value)}")


def to_string(value: Any, textual: bool) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)  # e.g. a zip code or mileage exported as a number
    else:
        raise FieldInvalid(f"expected a string, got {type(value).__name__}")
    if "\x00" in text:
        raise FieldInvalid("contains a NUL character")
    return text


def to_json(value: Any, textual: bool) -> Any:
    if not textual:
        return value
    if value is None or not str(value).strip():
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise FieldInvalid(f"is not valid JSON ({exc.msg} at column {exc.colno})") from None


def normalize_date(text: str) -> str:
    """ISO 8601 text of the same precision as the input (date, date-time or year-month)."""
    text = text.strip()
    if not text:
        return ""
    try:
        if _ISO_DATE_RE.match(text):
            return date.fromisoformat(text).isoformat()
        if _ISO_DATETIME_RE.match(text):
            return datetime.fromisoformat(text.replace(" ", "T", 1)).isoformat(timespec="seconds")
        if m := _ISO_MONTH_RE.match(text):
            return date(int(m[1]), int(m[2]), 1).isoformat()[:7]
        if m := _DE_DATE_RE.match(text):
            day = date(int(m[3]), int(m[2]), int(m[1]))
            if m[4] is None:
                return day.isoformat()
            moment = datetime(day.year, day.month, day.day, int(m[4]), int(m[5]), int(m[6] or 0))
            return moment.isoformat(timespec="seconds")
        if m := _DE_MONTH_RE.match(text):
            return date(int(m[2]), int(m[1]), 1).isoformat()[:7]
    except ValueError:
        raise FieldInvalid(f"is not a valid calendar date: {_describe(text)}") from None
    raise FieldInvalid(
        f"expected a date (YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], YYYY-MM or DD.MM.YYYY), got {_describe(text)}"
    )


def to_date(value: Any, textual: bool) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise FieldInvalid(f"expected a date string, got {type(value).__name__}")
    return normalize_date(value)


_CONVERTERS: dict[FieldKind, Callable[[Any, bool], Any]] = {
    FieldKind.INTEGER: to_integer,
    FieldKind.NUMBER: to_number,
    FieldKind.JSON: to_json,
    FieldKind.STRING: to_string,
    FieldKind.DATE: to_date,
}


def convert_record(raw: Mapping[str, Any], *, textual: bool) -> dict[str, Any]:
    """One order in spec field order and types; raises :class:`RowInvalid` listing every bad field."""
    problems: list[str] = []
    order: dict[str, Any] = {}
    for name in FIELD_NAMES:
        if name not in raw:
            problems.append(f"{name}: missing")
            continue
        try:
            order[name] = _CONVERTERS[FIELD_KINDS[name]](raw[name], textual)
        except FieldInvalid as exc:
            problems.append(f"{name}: {exc}")
    if "id" in order and not 1 <= order["id"] <= MAX_ID:
        problems.append(f"id: must be between 1 and {MAX_ID}, got {order['id']}")
    for name in ("station_id", "missing_parts", "zu_verplanen"):
        if name in order and not _INT32[0] <= order[name] <= _INT32[1]:
            problems.append(f"{name}: out of range for a 32-bit integer")
    if problems:
        raise RowInvalid(problems)
    return order
