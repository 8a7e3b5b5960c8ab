"""Query time specifications -> Unix epoch milliseconds. Pure.

Theory of operation: OpenTSDB 2.4 parses every query time with
``DateTime.parseDateTimeString`` (src/utils/DateTime.java; reference
``opentsdb-2.4-behaviour.md`` §1.2 "Time parsing"), tried in this order:

1. ``<digits>ms``: an absolute millisecond timestamp;
2. ``now`` (any case);
3. ``<duration>-ago`` (any case): now minus ``parse_duration(<duration>)``;
4. anything containing ``/`` or ``:``: an absolute date chosen by the string's *length*
   (10 ``yyyy/MM/dd``, 16 ``yyyy/MM/dd-HH:mm`` or ``yyyy/MM/dd HH:mm``, 19 with ``:ss``),
   read leniently like ``SimpleDateFormat`` (month 13 rolls into the next year) in the
   request's timezone, else the server's default timezone;
5. otherwise a number: ``<10 digits>.<1-3 digits>`` has its dot removed (so ``.5`` is
   5 ms, not 500), and a string of at most 10 characters is seconds, longer is
   milliseconds. This digit-count rule differs from the write path's magnitude rule.

``parse_duration`` keeps OpenTSDB's quirks: only the *last* character picks the unit
(``1xs`` is one second), ``ms`` needs a lower-case ``m`` before the ``s``, ``n`` is 30 days
and ``y`` 365 days. Errors are ``BadRequestError`` with OpenTSDB's messages.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
import zoneinfo

from tsd.errors import BadRequestError

_LONG_MAX = 2**63 - 1
_MS_SUFFIX = re.compile(r"[0-9]+ms")
_DOTTED_MS = re.compile(r"[0-9]{10}\.[0-9]{1,3}")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000,
            "n": 2_592_000_000, "y": 31_536_000_000}  # fmt: skip
#: SimpleDateFormat pattern per string length, chosen as DateTime.parseDateTimeString does.
_DATE_FIELDS = re.compile(r"([0-9]+)/([0-9]+)/([0-9]+)(?:[- ]([0-9]+):([0-9]+)(?::([0-9]+))?)?")


def now_ms() -> int:
    """The current time in Unix epoch milliseconds."""
    return time.time_ns() // 1_000_000


def parse_java_long(text: str) -> int:
    """OpenTSDB's strict ``Tags.parseLong``: optional sign, ASCII digits, Java overflow.

    Raises ValueError with the NumberFormatException message.
    """
    n = len(text)
    if n == 0:
        raise ValueError("Empty string")
    signed = text[0] in "+-"
    if signed and n == 1:
        raise ValueError(f"Just a sign, no value: {text}")
    if n > (20 if signed else 19):
        raise ValueError(f"Value too long: {text}")
    value = 0
    for ch in text[1:] if signed else text:
        if not "0" <= ch <= "9":
            raise ValueError(f"Invalid character '{ch}' in {text}")
        value = value * 10 + (ord(ch) - 48)
    value = -value if text[0] == "-" else value
    if not -(2**63) <= value <= _LONG_MAX:
        raise ValueError(f"Overflow in {text}")
    return value


def parse_duration(duration: str) -> int:
    """``DateTime.parseDuration``: ``<n><unit>`` -> milliseconds (``n`` > 0)."""
    if not duration:
        raise BadRequestError("Cannot parse null or empty duration")
    digits = 0
    while duration[digits].isdecimal():
        digits += 1
        if digits >= len(duration):
            raise BadRequestError(f"Invalid duration, must have an integer and unit: {duration}")
    try:
        amount = int(duration[:digits]) if digits else None
    except ValueError:
        amount = None
    if amount is None or amount > _LONG_MAX:
        raise BadRequestError(f"Invalid duration (number): {duration}")
    if amount <= 0:
        raise BadRequestError(f"Zero or negative duration: {duration}")
    unit = duration[-1].lower()
    if unit == "s" and duration[-2] == "m":
        return amount
    multiplier = _UNIT_MS.get(unit)
    if multiplier is None:
        raise BadRequestError(f"Invalid duration (suffix): {duration}")
    if float(amount) * multiplier > float(_LONG_MAX):
        raise BadRequestError(f"Duration must be < Long.MAX_VALUE ms: {duration}")
    return amount * multiplier


@functools.cache
def _known_timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() | {"UTC"})


def is_known_timezone(name: str) -> bool:
    """True when ``name`` is a timezone ID the server knows (Java: TimeZone IDs)."""
    return name in _known_timezones()


def get_timezone(name: str) -> dt.tzinfo:
    """The tzinfo for a known ID; ``UTC`` without touching the tz database."""
    if name == "UTC":
        return dt.UTC
    return zoneinfo.ZoneInfo(name)


def parse_datetime(
    text: str,
    timezone: str | None = None,
    *,
    now: int | None = None,
    default_timezone: str = "UTC",
) -> int:
    """``DateTime.parseDateTimeString``: any OpenTSDB query time -> epoch ms.

    ``timezone`` is the request's (POST ``timezone``); absolute dates without it use
    ``default_timezone`` (OpenTSDB: the JVM default, ``tsd.core.timezone``). ``now``
    defaults to the wall clock. Returns -1 for an empty string, as OpenTSDB does.
    """
    if not text:
        return -1
    if _MS_SUFFIX.fullmatch(text):
        return _parse_long_or_400(text[:-2], text)
    lowered = text.lower()
    current = now_ms() if now is None else now
    if lowered == "now":
        return current
    if lowered.endswith("-ago"):
        return current - parse_duration(text[:-4])
    if "/" in text or ":" in text:
        return _parse_absolute(text, timezone or default_timezone)
    if "." in text:
        if not _DOTTED_MS.fullmatch(text):
            raise BadRequestError(
                f"Invalid time: {text}. Millisecond timestamps must be in the format "
                "<seconds>.<ms> where the milliseconds are limited to 3 digits"
            )
        value = _parse_long_or_400(text.replace(".", ""), text)
    else:
        value = _parse_long_or_400(text, text)
    if value < 0:
        raise BadRequestError(f"Invalid time: {text}. Negative timestamps are not supported.")
    # OpenTSDB's digit-count rule ("works until November 2286").
    return value * 1000 if len(text) <= 10 else value


def _parse_long_or_400(digits: str, original: str) -> int:
    try:
        return parse_java_long(digits)
    except ValueError as exc:
        raise BadRequestError(f"Invalid time: {original}. {exc}") from None


def _parse_absolute(text: str, timezone: str) -> int:
    length = len(text)
    if length not in (10, 16, 19):
        raise BadRequestError(f"Invalid absolute date: {text}")
    if not is_known_timezone(timezone):
        raise BadRequestError(f"Invalid timezone name: {timezone}")
    match = _DATE_FIELDS.fullmatch(text)
    separator_ok = length == 10 or text[10] in "- "
    with_time = {10: 0, 16: 2, 19: 3}[length]
    if match is None or not separator_ok or _time_field_count(match) != with_time:
        raise BadRequestError(f'Invalid date: {text}. Unparseable date: "{text}"')
    year, month, day = (int(match.group(i)) for i in (1, 2, 3))
    hour, minute, second = (int(match.group(i) or 0) for i in (4, 5, 6))
    return lenient_local_to_ms(year, month, day, hour, minute, second, timezone)


def _time_field_count(match: re.Match[str]) -> int:
    return sum(1 for i in (4, 5, 6) if match.group(i) is not None)


def lenient_local_to_ms(
    year: int, month: int, day: int, hour: int, minute: int, second: int, timezone: str
) -> int:
    """A wall-clock time in ``timezone`` -> epoch ms, rolling over out-of-range fields the
    way a lenient ``java.util.Calendar`` does (month 13 -> January of the next year, day 0
    -> the last day of the previous month). Non-existent wall times use the offset before
    the transition (``fold=0``).
    """
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    try:
        base = dt.datetime(year, month, 1)
        wall = base + dt.timedelta(days=day - 1, hours=hour, minutes=minute, seconds=second)
        aware = wall.replace(tzinfo=get_timezone(timezone))
        return _aware_to_ms(aware)
    except (OverflowError, ValueError):
        raise BadRequestError(f"Invalid date: {year}/{month}/{day}") from None


def _aware_to_ms(aware: dt.datetime) -> int:
    delta = aware - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
