"""Query times: DateTime.parseDateTimeString and parseDuration (src/utils/DateTime.java)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tsd.errors import BadRequestError
from tsd.protocol.timespec import parse_datetime, parse_duration, parse_java_long

NOW = 1_700_000_000_123


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1s", 1_000, id="seconds"),
        pytest.param("5ms", 5, id="milliseconds"),
        pytest.param("2m", 120_000, id="minutes"),
        pytest.param("1h", 3_600_000, id="hours"),
        pytest.param("1d", 86_400_000, id="days"),
        pytest.param("1w", 604_800_000, id="weeks"),
        pytest.param("1n", 2_592_000_000, id="month_is_30_days"),
        pytest.param("1y", 31_536_000_000, id="year_is_365_days"),
        pytest.param("1H", 3_600_000, id="unit_case_insensitive"),
        # Only the last character picks the unit ...
        pytest.param("1xs", 1_000, id="middle_ignored"),
        # ... and "ms" needs a lower-case m: "5MS" is 5 seconds.
        pytest.param("5MS", 5_000, id="upper_ms_is_seconds"),
    ],
)
def test_parse_duration(text: str, expected: int) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "Cannot parse null or empty duration", id="empty"),
        pytest.param("10", "Invalid duration, must have an integer and unit: 10", id="no_unit"),
        pytest.param("h", "Invalid duration (number): h", id="no_number"),
        pytest.param("0h", "Zero or negative duration: 0h", id="zero"),
        pytest.param("1x", "Invalid duration (suffix): 1x", id="bad_unit"),
        pytest.param("99999999999999999999h", "Invalid duration (number): 99999999999999999999h",
                     id="number_too_long"),
        pytest.param("9999999999999999y", "Duration must be < Long.MAX_VALUE ms: 9999999999999999y",
                     id="overflow"),
    ],
)  # fmt: skip
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_duration(text)
    assert err.value.message == message
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("text", "tz", "expected"),
    [
        pytest.param("now", None, NOW, id="now"),
        pytest.param("NOW", None, NOW, id="now_any_case"),
        pytest.param("1h-ago", None, NOW - 3_600_000, id="relative"),
        pytest.param("30s-AGO", None, NOW - 30_000, id="relative_any_case"),
        pytest.param("1700000000", None, 1_700_000_000_000, id="ten_digits_seconds"),
        pytest.param("1700000000000", None, 1_700_000_000_000, id="thirteen_digits_ms"),
        pytest.param("100", None, 100_000, id="short_number_seconds"),
        # The rule is the string's length, not the magnitude.
        pytest.param("01700000000", None, 1_700_000_000, id="eleven_chars_ms"),
        pytest.param("1700000000.250", None, 1_700_000_000_250, id="dotted_ms"),
        # The dot is just removed: .5 is 5 ms.
        pytest.param("1700000000.5", None, 17_000_000_005, id="dotted_short_fraction"),
        pytest.param("1700000000123ms", None, 1_700_000_000_123, id="ms_suffix"),
        pytest.param("2013/01/02", None, 1_357_084_800_000, id="date"),
        pytest.param("2013/01/02-03:04", None, 1_357_095_840_000, id="date_dash_minutes"),
        pytest.param("2013/01/02 03:04", None, 1_357_095_840_000, id="date_space_minutes"),
        pytest.param("2013/01/02-03:04:05", None, 1_357_095_845_000, id="date_dash_seconds"),
        pytest.param("2013/01/02 03:04:05", None, 1_357_095_845_000, id="date_space_seconds"),
        pytest.param("2013/01/02-03:04:05", "America/New_York", 1_357_113_845_000,
                     id="date_in_timezone"),
        # SimpleDateFormat is lenient: month 13 is January of the next year.
        pytest.param("2012/13/02", None, 1_357_084_800_000, id="lenient_month"),
        pytest.param("", None, -1, id="empty_is_minus_one"),
    ],
)  # fmt: skip
def test_parse_datetime(text: str, tz: str | None, expected: int) -> None:
    assert parse_datetime(text, tz, now=NOW) == expected


def test_absolute_dates_use_the_default_timezone() -> None:
    utc = parse_datetime("2013/01/02", now=NOW)
    tokyo = parse_datetime("2013/01/02", now=NOW, default_timezone="Asia/Tokyo")
    assert utc - tokyo == 9 * 3_600_000


@pytest.mark.parametrize(
    ("text", "tz", "message"),
    [
        pytest.param("2013/1/2", None, "Invalid absolute date: 2013/1/2", id="bad_length"),
        pytest.param("2013/01/02", "Mars/Olympus", "Invalid timezone name: Mars/Olympus",
                     id="bad_timezone"),
        pytest.param("2013/aa/02", None, 'Invalid date: 2013/aa/02. Unparseable date: '
                     '"2013/aa/02"', id="unparseable"),
        pytest.param("1700000000.1234", None, "Invalid time: 1700000000.1234. Millisecond "
                     "timestamps must be in the format <seconds>.<ms> where the milliseconds "
                     "are limited to 3 digits", id="dotted_too_long"),
        pytest.param("-100", None, "Invalid time: -100. Negative timestamps are not "
                     "supported.", id="negative"),
        pytest.param("12x", None, "Invalid time: 12x. Invalid character 'x' in 12x",
                     id="not_a_number"),
        pytest.param("99999999999999999999", None, "Invalid time: 99999999999999999999. "
                     "Value too long: 99999999999999999999", id="too_long"),
        pytest.param("1q-ago", None, "Invalid duration (suffix): 1q", id="bad_relative"),
    ],
)  # fmt: skip
def test_parse_datetime_errors(text: str, tz: str | None, message: str) -> None:
    with pytest.raises(BadRequestError) as err:
        parse_datetime(text, tz, now=NOW)
    assert err.value.message == message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("9223372036854775807", 2**63 - 1, id="long_max"),
        pytest.param("-9223372036854775808", -(2**63), id="long_min"),
        pytest.param("+5", 5, id="plus_sign"),
    ],
)
def test_parse_java_long(text: str, expected: int) -> None:
    assert parse_java_long(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("9223372036854775808", "Overflow in 9223372036854775808", id="overflow"),
        pytest.param("-", "Just a sign, no value: -", id="sign_only"),
        pytest.param("", "Empty string", id="empty"),
    ],
)
def test_parse_java_long_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_java_long(text)


@given(st.text(max_size=24))
def test_any_text_parses_or_raises_bad_request(text: str) -> None:
    with contextlib.suppress(BadRequestError):
        parse_datetime(text, now=NOW)
