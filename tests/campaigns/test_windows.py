"""Calling windows in the organization's time zone: when the next call may start."""

from __future__ import annotations

from datetime import UTC, datetime

from parley.campaigns.service import next_opening

WEEKDAYS = [{"weekdays": [1, 2, 3, 4, 5], "start": "09:00", "end": "18:00"}]
BERLIN = "Europe/Berlin"


def test_inside_a_window_it_is_now() -> None:
    now = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)  # Wednesday 11:00 in Berlin
    assert next_opening(WEEKDAYS, [], BERLIN, now) == now


def test_after_hours_it_is_the_next_morning_in_the_organizations_zone() -> None:
    now = datetime(2026, 11, 25, 17, 30, tzinfo=UTC)  # 18:30 in Berlin: closed
    assert next_opening(WEEKDAYS, [], BERLIN, now) == datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    # the same instant is 12:30 in New York: open there
    assert next_opening(WEEKDAYS, [], "America/New_York", now) == now


def test_weekends_and_holidays_are_skipped() -> None:
    friday_evening = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)
    assert next_opening(WEEKDAYS, ["2026-11-30"], BERLIN, friday_evening) == datetime(
        2026, 12, 1, 8, 0, tzinfo=UTC
    )


def test_summer_time_and_midnight_end() -> None:
    july = datetime(2026, 7, 1, 6, 30, tzinfo=UTC)  # 08:30 CEST (UTC+2)
    assert next_opening(WEEKDAYS, [], BERLIN, july) == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)
    late = [{"weekdays": [3], "start": "20:00", "end": "24:00"}]
    at_2330 = datetime(2026, 11, 25, 22, 30, tzinfo=UTC)
    assert next_opening(late, [], BERLIN, at_2330) == at_2330
    assert next_opening(late, [], BERLIN, datetime(2026, 11, 25, 23, 0, tzinfo=UTC)) == datetime(
        2026, 12, 2, 19, 0, tzinfo=UTC
    )


def test_every_day_a_holiday_never_opens() -> None:
    only_one_day = [{"weekdays": [3], "start": "09:00", "end": "10:00"}]
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    wednesdays = [f"2026-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 32) if _ok(2026, m, d)]
    wednesdays += [f"2027-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 32) if _ok(2027, m, d)]
    assert next_opening(only_one_day, wednesdays, BERLIN, now) is None


def _ok(year: int, month: int, day: int) -> bool:
    try:
        return datetime(year, month, day).isoweekday() == 3
    except ValueError:
        return False
