"""Rollup and pre-aggregate cells as OpenTSDB 2.4.1 stores them (src/rollup/RollupUtils.java,
TSDB.addAggregatePointInternal). Pure.

A rollup row key is a data row key whose base time is the start of the interval's row
span (``rowSpan``: ``<n>h`` with n = 1 or even, ``1d``, ``1n``, ``1y``; days, months and
years are UTC calendar boundaries). Its qualifier is 3 bytes: the aggregator's id
(``aggregationIds`` of the config, 0 to 127), then 2 bytes holding the interval's index
in the span shifted left by 4 and OR-ed with the value's flags (as a data qualifier's,
so 14 bits: at most 7774 intervals per span). Values are encoded as data points are.
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass

from tsd.codec.const import FLAG_BITS, SECOND_MASK
from tsd.errors import CodecError

__all__ = [
    "RollupSpan",
    "rollup_base_time",
    "rollup_offset_ms",
    "rollup_qualifier",
]

MAX_INTERVALS = 7774
MIN_INTERVALS = 12
_SPAN_SECONDS = {"h": 3600, "d": 86400, "n": 86400 * 32, "y": 86400 * 366}


@dataclass(frozen=True, slots=True)
class RollupSpan:
    """What the bytes of one configured interval depend on (RollupInterval)."""

    #: the row span's unit: h, d, n or y
    units: str
    #: the row span's multiplier (only above 1 for hours)
    unit_multiplier: int
    #: the interval in seconds
    interval_seconds: int

    @property
    def intervals(self) -> int:
        """How many intervals a row holds (validated by the config: 12 to 7774)."""
        return _SPAN_SECONDS[self.units] * self.unit_multiplier // self.interval_seconds


def rollup_base_time(timestamp: int, span: RollupSpan) -> int:
    """RollupUtils.getRollupBasetime: the row's base time (seconds) for a timestamp in
    seconds or milliseconds."""
    if timestamp < 0:
        raise CodecError(f"Not supporting negative timestamps at this time: {timestamp}")
    seconds = timestamp // 1000 if timestamp & SECOND_MASK else timestamp
    if span.units == "h":
        modulo = 3600 * span.unit_multiplier if span.unit_multiplier > 1 else 3600
        return seconds - seconds % modulo
    day = dt.datetime.fromtimestamp(seconds, dt.UTC).date()
    if span.units == "n":
        day = day.replace(day=1)
    elif span.units == "y":
        day = day.replace(month=1, day=1)
    elif span.units != "d":
        raise CodecError(f"Unrecogznied span: {span}")
    return calendar.timegm(day.timetuple())


def rollup_qualifier(timestamp: int, base_time: int, flags: int, aggregator_id: int,
                     span: RollupSpan) -> bytes:  # fmt: skip
    """RollupUtils.buildRollupQualifier: ``[aggregator id][offset << 4 | flags]``."""
    seconds = timestamp // 1000 if timestamp & SECOND_MASK else timestamp
    offset = (seconds - base_time) // span.interval_seconds
    if offset >= span.intervals:
        raise CodecError(
            f"Offset of {offset} was greater than the configured intervals {span.intervals}"
        )
    packed = ((offset << FLAG_BITS) | flags) & 0xFFFF
    return bytes([aggregator_id & 0xFF]) + packed.to_bytes(2, "big")


def rollup_offset_ms(qualifier: bytes, span: RollupSpan, at: int = 1) -> int:
    """RollupUtils.getOffsetFromRollupQualifier: the cell's offset from the base time, in
    ms, from the 2 offset bytes at ``at`` (after the aggregator id)."""
    offset = int.from_bytes(qualifier[at : at + 2], "big") >> FLAG_BITS
    return offset * span.interval_seconds * 1000
