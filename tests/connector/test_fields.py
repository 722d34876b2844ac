"""Typed conversion of export values (German formats included)."""

from __future__ import annotations

import pytest

from parley.connector.fields import FieldInvalid, normalize_date, parse_number_text, to_integer, to_string


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12.5", 12.5),
        ("12,5", 12.5),
        ("1.234,56", 1234.56),
        ("1,234.56", 1234.56),
        ("1 234,5", 1234.5),
        ("1.234.567", 1234567.0),
        ("1.234.567,89", 1234567.89),
        ("-3,25", -3.25),
        (",5", 0.5),
        ("1234,50 €", 1234.5),
        ("99 EUR", 99.0),
        ("1e3", 1000.0),
    ],
)
def test_numbers(text: str, expected: float) -> None:
    assert parse_number_text(text) == expected


@pytest.mark.parametrize("text", ["abc", "1,2,3,4", "12.5.6,7,8", "nan", "inf", "1..2", "--1", ""])
def test_bad_numbers(text: str) -> None:
    with pytest.raises(FieldInvalid):
        parse_number_text(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-03-07", "2025-03-07"),
        ("07.03.2025", "2025-03-07"),
        ("7.3.2025", "2025-03-07"),
        ("07.03.2025 14:30", "2025-03-07T14:30:00"),
        ("07.03.2025, 14:30:15", "2025-03-07T14:30:15"),
        ("2025-03-07T14:30", "2025-03-07T14:30:00"),
        ("2025-03-07 14:30:00", "2025-03-07T14:30:00"),
        ("2025-03-07T14:30:00Z", "2025-03-07T14:30:00+00:00"),
        ("2025-03-07T14:30:00+01:00", "2025-03-07T14:30:00+01:00"),
        ("2025-03-07T14:30:00.123", "2025-03-07T14:30:00"),
        ("2026-05", "2026-05"),
        ("05/2026", "2026-05"),
        ("5.2026", "2026-05"),
        ("", ""),
        ("  ", ""),
    ],
)
def test_dates(text: str, expected: str) -> None:
    assert normalize_date(text) == expected


@pytest.mark.parametrize(
    "text", ["31.02.2025", "2025-13-01", "2025-00", "gestern", "2025/03/07", "07-03-2025"]
)
def test_bad_dates(text: str) -> None:
    with pytest.raises(FieldInvalid):
        normalize_date(text)


def test_integers_and_strings() -> None:
    assert to_integer("12", True) == 12
    assert to_integer("12,0", True) == 12
    assert to_integer(7.0, False) == 7
    bad_integers: list[object] = ["1.5", True, None, "", "sieben", 2.5, [1]]
    for bad in bad_integers:
        with pytest.raises(FieldInvalid):
            to_integer(bad, True)
    assert to_string(1067, False) == "1067"
    assert to_string(None, False) == ""
    assert to_string("  München ", True) == "München"
    bad_strings: list[object] = [1.5, True, {"a": 1}]
    for bad in bad_strings:
        with pytest.raises(FieldInvalid):
            to_string(bad, False)
