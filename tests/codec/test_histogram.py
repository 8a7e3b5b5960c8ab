"""SimpleHistogram's bytes and Kryo 2.21's varlong (tsd/codec/histogram.py); the cells are
compared with OpenTSDB's in tests/hbase/test_rollup_parity.py."""

from __future__ import annotations

import math
import struct

import pytest

from tsd.codec.histogram import (
    HistogramError,
    SimpleHistogram,
    decode_simple_histogram,
    encode_simple_histogram,
    histogram_qualifier,
    read_varlong,
    write_varlong,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (2**14, "808001"),
        (2**56 - 1, "ffffffffffffff7f"),
        (2**56, "8080808080808080" + "01"),
        (2**63 - 1, "ffffffffffffffff7f"),
        (-1, "ffffffffffffffffff"),
        (-(2**63), "808080808080808080"),
    ],
)
def test_varlong_is_kryos(value: int, encoded: str) -> None:
    assert write_varlong(value).hex() == encoded
    assert read_varlong(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_buckets_are_written_in_float_order_with_the_id_first() -> None:
    h = SimpleHistogram(9, underflow=1, overflow=200)
    h.add_bucket(1.0, 2.0, 3)
    h.add_bucket(-0.0, 1.0, 4)
    h.add_bucket(0.0, 1.0, 5)
    h.add_bucket(math.nan, 1.0, 6)
    raw = encode_simple_histogram(h, True)
    expected = bytes([9]) + struct.pack(">h", 4)
    for low, count in ((-0.0, 4), (0.0, 5)):
        expected += struct.pack(">ff", low, 1.0) + bytes([count])
    expected += struct.pack(">ff", 1.0, 2.0) + bytes([3])
    expected += struct.pack(">ff", math.nan, 1.0) + bytes([6]) + bytes([1]) + bytes.fromhex("c801")
    assert raw == expected
    back = decode_simple_histogram(raw, True, 9)
    assert encode_simple_histogram(back, True) == raw


def test_the_same_bounds_replace_a_bucket() -> None:
    h = SimpleHistogram(0)
    h.add_bucket(0.1, 0.2, 1)
    h.add_bucket(0.1, 0.2, 7)  # float32 bounds, equal
    assert list(h.buckets.values()) == [7]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x00\x01", "Byte array shorter than 6 bytes detected: [0, 1]"),
        (b"\x00\x02\x00\x00\x00\x00", "Buffer underflow."),
    ],
)
def test_bad_bytes(raw: bytes, message: str) -> None:
    with pytest.raises(HistogramError) as info:
        decode_simple_histogram(raw, False, 0)
    assert info.value.message == message


def test_qualifiers_of_seconds_and_milliseconds() -> None:
    hour = 1356998400
    assert histogram_qualifier(hour + 61) == b"\x06\x00\x3d"
    assert histogram_qualifier((hour + 1) * 1000 + 5) == b"\x06\x00\x00\x03\xed"
