"""Histogram cells as OpenTSDB 2.4.1 stores them (src/core/SimpleHistogram.java,
SimpleHistogramDecoder.java, HistogramDataPoint.java, Internal.getQualifier; Kryo 2.21's
Output/Input for the byte forms). Pure.

A histogram point is one cell of the data table: qualifier ``06`` then the offset in the
hour (2 bytes of seconds, or 4 bytes of milliseconds), value = the codec id (1 byte) then
the codec's bytes. SimpleHistogram's bytes::

    [bucket count: 2 bytes, big-endian]
    per bucket, in (lower, upper) order (Float.compare):
        [lower: float32 BE][upper: float32 BE][count: Kryo varlong]
    [underflow: Kryo varlong][overflow: Kryo varlong]

A Kryo varlong (``writeLong(v, true)``) is the 64-bit two's complement value 7 bits at a
time, low bits first, 0x80 marking a following byte; the 9th byte, if reached, holds the
last 8 bits whole (a negative count takes 9 bytes).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Final

from tsd.codec.const import HISTOGRAM_PREFIX, MAX_TIMESPAN, SECOND_MASK
from tsd.errors import CodecError
from tsd.java_text import format_java_bytes

__all__ = [
    "HistogramError",
    "SimpleHistogram",
    "decode_simple_histogram",
    "encode_simple_histogram",
    "histogram_qualifier",
    "read_varlong",
    "write_varlong",
]

_F4: Final = struct.Struct(">f")
_MASK64: Final = (1 << 64) - 1


class HistogramError(CodecError):
    """Bytes SimpleHistogram cannot read (Kryo's "Buffer underflow.", or too short)."""


def float_order(value: float) -> tuple[int, float, int]:
    """A sort key ordering floats as Java's Float.compare: -0.0 before 0.0, NaN last."""
    if math.isnan(value):
        return (1, 0.0, 0)
    return (0, value, 0 if math.copysign(1.0, value) < 0 else 1)


def to_float32(value: float) -> float:
    """The float32 nearest ``value`` (Java's ``(float)`` of a double)."""
    if math.isnan(value) or math.isinf(value):
        return value
    try:
        return float(_F4.unpack(_F4.pack(value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(slots=True)
class SimpleHistogram:
    """OpenTSDB's SimpleHistogram: float32 bucket bounds -> counts, underflow, overflow.

    Buckets are keyed as Java's TreeMap keys them, by Float.compare of the bounds: -0.0 and
    0.0 are two buckets, NaN bounds one."""

    codec_id: int
    #: (order key of lower, of upper) -> (lower, upper, count)
    entries: dict[tuple[tuple[int, float, int], ...], tuple[float, float, int]] = field(
        default_factory=dict
    )
    underflow: int = 0
    overflow: int = 0

    def add_bucket(self, lower: float, upper: float, count: int) -> None:
        """addBucket: a bucket with the same bounds is replaced."""
        low, high = to_float32(lower), to_float32(upper)
        self.entries[(float_order(low), float_order(high))] = (low, high, count)

    @property
    def buckets(self) -> dict[tuple[float, float], int]:
        """(lower, upper) -> count, in TreeMap order (for reading; -0.0 and 0.0 collide)."""
        return {(low, high): count for low, high, count in self.ordered()}

    def ordered(self) -> list[tuple[float, float, int]]:
        """The buckets in TreeMap order."""
        return [self.entries[key] for key in sorted(self.entries)]


def write_varlong(value: int) -> bytes:
    """Kryo 2.21 ``Output.writeLong(value, true)``."""
    v = value & _MASK64
    out = bytearray()
    for _ in range(8):
        if v >> 7 == 0:
            out.append(v)
            return bytes(out)
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v & 0xFF)
    return bytes(out)


def read_varlong(data: bytes, at: int) -> tuple[int, int]:
    """Kryo 2.21 ``Input.readLong(true)``: (signed value, next position)."""
    result = 0
    for i in range(9):
        if at >= len(data):
            raise HistogramError("Buffer underflow.")
        byte = data[at]
        at += 1
        if i == 8:
            result |= byte << 56
            break
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            break
    result &= _MASK64
    return (result - (1 << 64) if result >> 63 else result), at


def encode_simple_histogram(histogram: SimpleHistogram, include_id: bool) -> bytes:
    """SimpleHistogram.histogram(include_id)."""
    out = bytearray()
    if include_id:
        out.append(histogram.codec_id & 0xFF)
    out += (len(histogram.entries) & 0xFFFF).to_bytes(2, "big")
    for lower, upper, count in histogram.ordered():
        out += _F4.pack(lower) + _F4.pack(upper) + write_varlong(count)
    out += write_varlong(histogram.underflow) + write_varlong(histogram.overflow)
    return bytes(out)


def decode_simple_histogram(raw: bytes, include_id: bool, codec_id: int) -> SimpleHistogram:
    """SimpleHistogram.fromHistogram (the id byte, when present, is skipped)."""
    if len(raw) < 6:
        raise HistogramError(f"Byte array shorter than 6 bytes detected: {format_java_bytes(raw)}")
    at = 1 if include_id else 0
    if at + 2 > len(raw):
        raise HistogramError("Buffer underflow.")
    count = int.from_bytes(raw[at : at + 2], "big", signed=True)
    at += 2
    histogram = SimpleHistogram(codec_id)
    for _ in range(count):
        if at + 8 > len(raw):
            raise HistogramError("Buffer underflow.")
        lower, upper = _F4.unpack(raw[at : at + 4])[0], _F4.unpack(raw[at + 4 : at + 8])[0]
        value, at = read_varlong(raw, at + 8)
        histogram.add_bucket(lower, upper, value)
    histogram.underflow, at = read_varlong(raw, at)
    histogram.overflow, at = read_varlong(raw, at)
    return histogram


def histogram_qualifier(timestamp: int) -> bytes:
    """Internal.getQualifier(timestamp, HistogramDataPoint.PREFIX)."""
    if timestamp & SECOND_MASK:
        base = timestamp // 1000 - (timestamp // 1000) % MAX_TIMESPAN
        offset = timestamp - base * 1000
        return bytes([HISTOGRAM_PREFIX]) + (offset & 0xFFFFFFFF).to_bytes(4, "big")
    offset = timestamp - (timestamp - timestamp % MAX_TIMESPAN)
    return bytes([HISTOGRAM_PREFIX]) + offset.to_bytes(2, "big")
