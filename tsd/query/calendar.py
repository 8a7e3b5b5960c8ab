"""Calendar-aligned downsampling intervals (``1dc``, ``useCalendar``). Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.3; OpenTSDB
src/utils/DateTime.java ``previousInterval`` and the calendar stepping in
src/core/Downsampler.java / FillingDownsampler.java):

``previous_interval(ts)`` finds the start of the interval holding ``ts``. It truncates
``ts`` to an anchor in the timezone's wall clock — the top of the next larger unit when
the amount divides it evenly (``15m`` from the top of the hour, ``6h`` from midnight),
else the top of the unit above that (``7m`` from midnight, ``5h`` from the first of the
month, ``2d`` from January 1st); weeks start on Sunday (Java's US locale); months and
years count from January 1st — then steps forward by the interval. A downsampler then
walks on from that first interval by adding the interval again and again, so for amounts
that do not divide the larger unit the grid is anchored at the series' first point.

Milliseconds, seconds, minutes and hours step by fixed durations (Java's
``Calendar.add`` does); days, weeks, months and years keep the wall-clock time across
DST changes. Wall times that do not exist resolve with the offset before the change.
"""

from __future__ import annotations

import datetime as dt
import functools

import numpy as np
import numpy.typing as npt

from tsd.errors import BadRequestError

#: Units that ``Calendar.add`` steps by a fixed duration, in ms.
FIXED_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_FIXED_MS = FIXED_UNIT_MS
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@functools.cache
def _zone(name: str) -> dt.tzinfo:
    if name == "UTC":
        return dt.UTC
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadRequestError("The timezone specification could not be found") from None


def _to_local(ts_ms: int, tz: dt.tzinfo) -> dt.datetime:
    seconds, millis = divmod(ts_ms, 1000)
    # replace() keeps ``fold`` (the second pass of a repeated hour); adding would not.
    return dt.datetime.fromtimestamp(seconds, tz).replace(microsecond=millis * 1000)


def _wall_to_ms(wall: dt.datetime, tz: dt.tzinfo) -> int:
    """A naive wall-clock time in ``tz`` -> epoch ms (fold 0 for gaps and overlaps)."""
    delta = wall.replace(tzinfo=tz, fold=0) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _local_to_ms(local: dt.datetime) -> int:
    delta = local - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _add_months(wall: dt.datetime, months: int) -> dt.datetime:
    index = wall.year * 12 + (wall.month - 1) + months
    return wall.replace(year=index // 12, month=index % 12 + 1)


def _anchor(ts_ms: int, amount: int, unit: str, tz: dt.tzinfo) -> tuple[int, int, str]:
    """(anchor ms, step amount, step unit) before DateTime.previousInterval's walk."""
    local = _to_local(ts_ms, tz)
    if unit == "ms":
        cut = local.replace(microsecond=0)
        if 1000 % amount != 0:
            cut = cut.replace(second=0)
        return _local_to_ms(cut), amount, unit
    if unit == "s":
        cut = local.replace(microsecond=0, second=0)
        if 60 % amount != 0:
            cut = cut.replace(minute=0)
        return _local_to_ms(cut), amount, unit
    if unit == "m":
        cut = local.replace(microsecond=0, second=0, minute=0)
        if 60 % amount != 0:
            return _wall_to_ms(_midnight(local), tz), amount, unit
        return _local_to_ms(cut), amount, unit
    day = _midnight(local)
    if unit == "h":
        top = day if 24 % amount == 0 else day.replace(day=1)
        return _wall_to_ms(top, tz), amount, unit
    if unit == "d":
        top = day.replace(day=1) if amount == 1 else day.replace(day=1, month=1)
        return _wall_to_ms(top, tz), amount, unit
    if unit == "w":
        # Both of OpenTSDB's branches end on the Sunday opening the current week.
        sunday = day - dt.timedelta(days=(day.weekday() + 1) % 7)
        return _wall_to_ms(sunday, tz), 7, "d"
    if unit in ("n", "y"):
        return _wall_to_ms(day.replace(day=1, month=1), tz), amount, unit
    raise BadRequestError(f"Unrecognized unit type: {unit}")


def _midnight(local: dt.datetime) -> dt.datetime:
    return local.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)


def add_interval(ts_ms: int, amount: int, unit: str, timezone: str) -> int:
    """``Calendar.add`` of ``amount`` units (weeks as 7-day steps) to ``ts_ms``."""
    if unit in _FIXED_MS:
        return ts_ms + amount * _FIXED_MS[unit]
    tz = _zone(timezone)
    wall = _to_local(ts_ms, tz).replace(tzinfo=None)
    if unit in ("d", "w"):
        days = amount * (7 if unit == "w" else 1)
        return _wall_to_ms(wall + dt.timedelta(days=days), tz)
    months = amount * (12 if unit == "y" else 1)
    return _wall_to_ms(_add_months(wall, months), tz)


def previous_interval(ts_ms: int, amount: int, unit: str, timezone: str) -> int:
    """``DateTime.previousInterval``: the start of the calendar interval holding ``ts_ms``."""
    if ts_ms < 0:
        raise BadRequestError("Timestamp cannot be less than zero")
    if amount < 1:
        raise BadRequestError("Interval must be greater than zero")
    tz = _zone(timezone)
    anchor, step, step_unit = _anchor(ts_ms, amount, unit, tz)
    if anchor == ts_ms:
        return anchor
    if step_unit in _FIXED_MS:
        size = step * _FIXED_MS[step_unit]
        return anchor + (ts_ms - anchor) // size * size
    starts = interval_starts(anchor, step, step_unit, timezone, ts_ms)
    return int(starts[np.searchsorted(starts, ts_ms, side="right") - 1])


def interval_starts(
    anchor_ms: int, amount: int, unit: str, timezone: str, until_ms: int
) -> npt.NDArray[np.int64]:
    """Interval starts ``anchor, anchor + 1 interval, ...`` up to the first one after
    ``until_ms`` (inclusive of it), the way a downsampler steps its calendar."""
    if unit in _FIXED_MS:
        size = amount * _FIXED_MS[unit]
        count = max(0, (until_ms - anchor_ms) // size) + 2
        return anchor_ms + np.arange(count, dtype=np.int64) * size
    tz = _zone(timezone)
    wall = _to_local(anchor_ms, tz).replace(tzinfo=None)
    starts = [anchor_ms]
    k = 0
    while starts[-1] <= until_ms:
        k += 1
        if unit in ("d", "w"):
            step = dt.timedelta(days=k * amount * (7 if unit == "w" else 1))
            starts.append(_wall_to_ms(wall + step, tz))
        else:
            starts.append(
                _wall_to_ms(_add_months(wall, k * amount * (12 if unit == "y" else 1)), tz)
            )
    return np.array(starts, dtype=np.int64)
