"""Calendar intervals: DateTime.previousInterval and Calendar.add (src/utils/DateTime.java)."""

from __future__ import annotations

import datetime as dt

import pytest

from tsd.query.calendar import add_interval, previous_interval


def ms(text: str) -> int:
    """An ISO time (with offset) in epoch ms."""
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    ("ts", "amount", "unit", "tz", "expected"),
    [
        pytest.param("2020-01-15T10:37:12+00:00", 15, "m", "UTC", "2020-01-15T10:30:00+00:00",
                     id="minutes_dividing_an_hour"),
        # 7 does not divide 60: counted from midnight (1 h = 8 x 7 min + 4).
        pytest.param("2020-01-15T01:00:00+00:00", 7, "m", "UTC", "2020-01-15T00:56:00+00:00",
                     id="minutes_from_midnight"),
        # 5 does not divide 24: counted from the first of the month.
        pytest.param("2020-01-02T03:00:00+00:00", 5, "h", "UTC", "2020-01-02T01:00:00+00:00",
                     id="hours_from_month_start"),
        pytest.param("2020-01-04T12:00:00+00:00", 2, "d", "UTC", "2020-01-03T00:00:00+00:00",
                     id="days_from_january_first"),
        pytest.param("2020-01-15T12:00:00+00:00", 1, "w", "UTC", "2020-01-12T00:00:00+00:00",
                     id="week_from_sunday"),
        pytest.param("2020-03-15T12:00:00+00:00", 1, "n", "UTC", "2020-03-01T00:00:00+00:00",
                     id="month"),
        pytest.param("2020-07-15T12:00:00+00:00", 5, "n", "UTC", "2020-06-01T00:00:00+00:00",
                     id="five_months_from_january"),
        pytest.param("2020-07-15T12:00:00+00:00", 3, "y", "UTC", "2020-01-01T00:00:00+00:00",
                     id="years_start_this_year"),
        pytest.param("2020-01-15T10:01:40+00:00", 45, "s", "UTC", "2020-01-15T10:01:30+00:00",
                     id="seconds_from_top_of_hour"),
        pytest.param("2020-03-08T12:00:00+00:00", 1, "d", "America/New_York",
                     "2020-03-08T00:00:00-05:00", id="day_in_new_york_on_dst_day"),
        pytest.param("2020-01-15T10:37:00+00:00", 1, "h", "Asia/Kolkata",
                     "2020-01-15T10:30:00+00:00", id="hour_in_half_hour_zone"),
    ],
)  # fmt: skip
def test_previous_interval(ts: str, amount: int, unit: str, tz: str, expected: str) -> None:
    assert previous_interval(ms(ts), amount, unit, tz) == ms(expected)


@pytest.mark.parametrize(
    ("ts", "amount", "unit", "expected"),
    [
        pytest.param(1234, 500, "ms", 1000, id="ms_dividing_a_second"),
        pytest.param(1234, 300, "ms", 1200, id="ms_from_top_of_minute"),
    ],
)
def test_previous_interval_milliseconds(ts: int, amount: int, unit: str, expected: int) -> None:
    assert previous_interval(ts, amount, unit, "UTC") == expected


def test_adding_days_keeps_local_midnight_across_dst() -> None:
    start = ms("2020-03-08T00:00:00-05:00")
    assert add_interval(start, 1, "d", "America/New_York") == ms("2020-03-09T00:00:00-04:00")


def test_adding_hours_is_a_fixed_duration() -> None:
    start = ms("2020-03-08T00:00:00-05:00")
    assert add_interval(start, 3, "h", "America/New_York") == start + 3 * 3_600_000


def test_adding_a_week_and_a_month() -> None:
    start = ms("2020-01-31T00:00:00+00:00")
    assert add_interval(start, 2, "w", "UTC") == ms("2020-02-14T00:00:00+00:00")
    assert add_interval(ms("2020-01-01T00:00:00+00:00"), 13, "n", "UTC") == ms(
        "2021-02-01T00:00:00+00:00"
    )
