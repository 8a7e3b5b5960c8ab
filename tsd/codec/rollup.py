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
import struct
from dataclasses import dataclass

from tsd.codec.const import FLAG_BITS, FLAG_FLOAT, SECOND_MASK, TIMESTAMP_BYTES
from tsd.errors import CodecError

__all__ = [
    "RollupSpan",
    "rollup_row_key",
    "rollup_slot",
    "rollup_value_bytes",
    "rollup_base_time",
    "rollup_offset_ms",
    "rollup_qualifier",
]

MAX_INTERVALS = 7774
MIN_INTERVALS = 12
_SPAN_SECONDS = {"h": 3600, "d": 86400, "n": 86400 * 32, "y": 86400 * 366}
_FLOAT4 = struct.Struct(">f")
_FLOAT8 = struct.Struct(">d")


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


def rollup_value_bytes(value: int | float, *, float32: bool = False) -> tuple[int, bytes]:
    """A rollup value's flags and bytes as TSDB.addAggregatePoint stores them: an integer
    on the fewest of 1, 2, 4, 8 bytes; a float on 8 bytes, or on 4 when ``float32`` (the
    telnet command's Float.parseFloat) and the float holds it exactly."""
    if isinstance(value, int):
        for width in (1, 2, 4):
            bound = 1 << (width * 8 - 1)
            if -bound <= value < bound:
                return width - 1, value.to_bytes(width, "big", signed=True)
        return 7, value.to_bytes(8, "big", signed=True)
    if float32 and _FLOAT4.unpack(_FLOAT4.pack(value))[0] == value:
        return FLAG_FLOAT | 0x3, _FLOAT4.pack(value)
    return FLAG_FLOAT | 0x7, _FLOAT8.pack(value)


def rollup_row_key(data_key: bytes, base_time: int, tags_start: int) -> bytes:
    """The rollup row key of a data row key's series at ``base_time`` (the key with its
    4 base-time bytes, which end at ``tags_start``, replaced; the salt does not depend on
    time)."""
    at = tags_start - TIMESTAMP_BYTES
    return data_key[:at] + base_time.to_bytes(TIMESTAMP_BYTES, "big") + data_key[tags_start:]


def rollup_slot(qualifier: bytes) -> bytes:
    """What a rollup qualifier addresses: its aggregator id and interval, without the value's
    flags (two cells of one slot are one interval written with values of two widths)."""
    return qualifier[:2] + bytes([qualifier[2] & 0xF0]) if len(qualifier) == 3 else qualifier
