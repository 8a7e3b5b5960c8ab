"""Hypothesis round trips over the whole codec.

Values compare bit for bit through struct.pack(">d") (as Prometheus' FuzzXORChunk does), so
-0.0 and every float32-exact value are checked exactly.
"""

from __future__ import annotations

import math
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec.append import encode_append_entry
from tsd.codec.compaction import compact_row, decode_cells
from tsd.codec.qualifier import (
    decode_qualifier,
    encode_ms_qualifier,
    encode_point,
    encode_points_into,
    encode_seconds_qualifier,
    reference_encode_point,
)
from tsd.codec.rowkey import KeyLayout, decode_row_key, encode_row_key, make_series_key
from tsd.codec.tsuid import parse_tsuid_hex, tsuid_from_row_key, tsuid_to_hex
from tsd.codec.value import decode_value, encode_value, parse_value
from tsd.errors import CodecError

pytestmark = pytest.mark.slow  # many generated inputs

#: Applied per test: a module-level profile would leak into every other test file.
codec_settings = settings(max_examples=300, deadline=None)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
VALUES = st.one_of(INT64, FINITE, FLOAT32)


def same(a: int | float, b: int | float) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and struct.pack(">d", a) == struct.pack(">d", b)
    return type(a) is type(b) and a == b


@codec_settings
@given(VALUES)
def test_value_round_trip_is_bit_exact(value: int | float) -> None:
    flags, data = encode_value(value)
    assert len(data) == (flags & 0x7) + 1
    assert same(decode_value(flags, data), value)


@codec_settings
@given(INT64)
def test_integer_width_is_the_smallest_that_fits(value: int) -> None:
    _, data = encode_value(value)
    for width in (1, 2, 4, 8):
        if -(2 ** (8 * width - 1)) <= value < 2 ** (8 * width - 1):
            assert len(data) == width
            break


@codec_settings
@given(FINITE)
def test_float_width_is_4_exactly_when_float32_is_exact(value: float) -> None:
    flags, data = encode_value(value)
    fits = (
        abs(value) <= 3.4028234663852886e38
        and struct.unpack(">f", struct.pack(">f", value))[0] == value
    )
    assert (flags, len(data)) == ((0xB, 4) if fits else (0xF, 8))


@codec_settings
@given(INT64)
def test_parse_value_of_integer_text(value: int) -> None:
    assert same(parse_value(str(value)), value)


@codec_settings
@given(FINITE)
def test_parse_value_of_float_text(value: float) -> None:
    text = repr(value)  # always has '.', 'e' or 'E' for a Python float
    assert same(parse_value(text), value)


NUMBERISH = st.text(alphabet="0123456789+-.eExXpPfFdD_aNI \t", max_size=24)


@codec_settings
@given(st.one_of(NUMBERISH, st.text(max_size=24)))
def test_parse_value_never_raises_anything_else(text: str) -> None:
    try:
        value = parse_value(text)
    except CodecError:
        return
    assert isinstance(value, int | float)
    assert not isinstance(value, float) or math.isfinite(value)


@codec_settings
@given(st.integers(0, 3599), st.integers(0, 15))
def test_seconds_qualifier_round_trip(offset_s: int, flags: int) -> None:
    assert decode_qualifier(encode_seconds_qualifier(offset_s, flags)) == (
        offset_s * 1000,
        flags,
        False,
    )


@codec_settings
@given(st.integers(0, 3_599_999), st.integers(0, 15))
def test_ms_qualifier_round_trip(offset_ms: int, flags: int) -> None:
    assert decode_qualifier(encode_ms_qualifier(offset_ms, flags)) == (offset_ms, flags, True)


TIMESTAMPS = st.one_of(
    st.integers(0, 2**32 - 1),  # seconds
    st.integers(2**32, 9_999_999_999_999),  # milliseconds
)


@codec_settings
@given(TIMESTAMPS, VALUES)
def test_encode_point_decodes_back(timestamp: int, value: int | float) -> None:
    base_time_s, qualifier, data = encode_point(timestamp, value)
    assert base_time_s % 3600 == 0
    offset_ms, flags, is_ms = decode_qualifier(qualifier)
    assert is_ms == (timestamp > 0xFFFFFFFF)
    expected_ms = timestamp if is_ms else timestamp * 1000
    assert base_time_s * 1000 + offset_ms == expected_ms
    assert same(decode_value(flags, data), value)


#: Values around every width the inline encoder switches on, besides random ones.
EDGE_VALUES = st.sampled_from(
    [
        *(
            sign * edge + d
            for edge in (2**7, 2**15, 2**31, 2**63)
            for sign in (1, -1)
            for d in (-1, 0, 1)
        ),
        0.0,
        -0.0,
        3.4028234663852886e38,  # float32 max
        3.4028235677973366e38,  # rounds to float32 max, still packs
        3.402823669209385e38,  # beyond float32 (packing overflows)
        1e-45,
        5e-324,
        float("inf"),
        float("nan"),
    ]
)


def encode_value_or_none(value: int | float) -> tuple[int, bytes] | None:
    try:
        return encode_value(value)
    except CodecError:
        return None


@codec_settings
@given(TIMESTAMPS | st.integers(-(2**63), -1), VALUES | EDGE_VALUES)
def test_encode_point_matches_the_reference(timestamp: int, value: int | float) -> None:
    """The inline hot-path encoder gives the same bytes (or the same error) as
    encode_value + build_qualifier."""
    try:
        expected: object = reference_encode_point(timestamp, value)
    except CodecError as exc:
        expected = type(exc)
    try:
        got: object = encode_point(timestamp, value)
    except CodecError as exc:
        got = type(exc)
    assert got == expected


@codec_settings
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            TIMESTAMPS | st.sampled_from([1356998400, 1356998401]),
            VALUES | EDGE_VALUES.filter(lambda v: encode_value_or_none(v) is not None),
        ),
        max_size=12,
    )
)
def test_bulk_encoding_matches_one_point_at_a_time(
    points: list[tuple[int, int, int | float]],
) -> None:
    """encode_points_into gives the cells encode_point gives, the last point of a cell
    winning, and counts the distinct cells."""
    layout = KeyLayout()
    series = [
        make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
        for i in range(3)
    ]
    expected: dict[bytes, dict[bytes, bytes]] = {}
    for index, timestamp, value in points:
        base_time_s, qualifier, data = encode_point(timestamp, value)
        expected.setdefault(series[index].row_key(base_time_s), {})[qualifier] = data
    rows: dict[bytes, dict[bytes, bytes]] = {}
    added = encode_points_into(rows, [(series[i], t, v) for i, t, v in points])
    assert rows == expected
    assert added == sum(len(cells) for cells in expected.values())


def uid(width: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=width, max_size=width)


LAYOUTS = st.builds(
    KeyLayout,
    metric_width=st.integers(1, 4),
    tagk_width=st.integers(1, 4),
    tagv_width=st.integers(1, 4),
    salt_width=st.integers(0, 2),
    salt_buckets=st.integers(1, 300),
)


@codec_settings
@given(st.data(), LAYOUTS)
def test_row_key_round_trip(data: st.DataObject, layout: KeyLayout) -> None:
    metric = data.draw(uid(layout.metric_width).filter(any))
    tagks = data.draw(st.sets(uid(layout.tagk_width), min_size=1, max_size=8))
    tags = [(k, data.draw(uid(layout.tagv_width))) for k in tagks]
    base = data.draw(st.integers(0, 2**32 - 1).map(lambda t: t - t % 3600))
    key = encode_row_key(layout, metric, base, tags)
    parts = decode_row_key(layout, key)
    assert parts.metric_uid == metric
    assert parts.base_time_s == base
    assert parts.tags == tuple(sorted(tags))
    assert len(parts.salt) == layout.salt_width
    if layout.salt_width:
        assert int.from_bytes(parts.salt, "big") < layout.salt_buckets
    series = make_series_key(layout, metric, list(reversed(tags)))
    assert series.row_key(base) == key
    tsuid = tsuid_from_row_key(layout, key)
    assert tsuid == series.tsuid
    assert parse_tsuid_hex(tsuid_to_hex(tsuid)) == tsuid


POINT = st.tuples(
    st.booleans(),  # ms qualifier?
    st.integers(0, 3_599_999),
    VALUES,
)


@codec_settings
@given(st.lists(POINT, max_size=40), st.randoms(use_true_random=False), st.booleans())
def test_compaction_of_random_points_decodes_back(
    points: list[tuple[bool, int, int | float]], rnd: random.Random, use_append: bool
) -> None:
    """Write points as single, pre-compacted and append cells; compaction keeps them all."""
    by_time: dict[int, tuple[bytes, bytes]] = {}
    for is_ms, offset_ms, value in points:
        flags, data = encode_value(value)
        if is_ms:
            qualifier = encode_ms_qualifier(offset_ms, flags)
        else:
            offset_ms -= offset_ms % 1000
            qualifier = encode_seconds_qualifier(offset_ms // 1000, flags)
        by_time[offset_ms] = (qualifier, data)  # one value per instant: no conflicts
    entries = list(by_time.items())
    rnd.shuffle(entries)
    cells: list[tuple[bytes, bytes]] = []
    appended = b""
    i = 0
    while i < len(entries):
        size = rnd.randint(1, 4)
        chunk = sorted(entries[i : i + size])
        i += size
        if use_append and rnd.random() < 0.3:
            appended += b"".join(encode_append_entry(q, v) for _, (q, v) in reversed(chunk))
        elif len(chunk) == 1:
            cells.append(chunk[0][1])
        else:
            mixed = len({len(q) for _, (q, _) in chunk}) > 1
            cells.append(
                (
                    b"".join(q for _, (q, _) in chunk),
                    b"".join(v for _, (_, v) in chunk) + bytes((1 if mixed else 0,)),
                )
            )
    if appended:
        cells.append((b"\x05\x00\x00", appended))
    # An identical duplicate of one point must not change anything.
    if entries:
        cells.append(entries[0][1])

    base = 1356998400
    compacted = compact_row(cells)
    if not by_time:
        assert compacted is None
        return
    assert compacted is not None
    decoded = decode_cells(base, [compacted]).points
    assert [p.timestamp_ms for p in decoded] == [base * 1000 + t for t in sorted(by_time)]
    for point in decoded:
        qualifier, data = by_time[point.timestamp_ms - base * 1000]
        assert point.qualifier == qualifier
        assert point.value_bytes == data
    assert decode_cells(base, cells).points == decoded
    kinds = {len(p.qualifier) for p in decoded}
    if len(decoded) > 1:
        assert compacted[1][-1] == (1 if kinds == {2, 4} else 0)
