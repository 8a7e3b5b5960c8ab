"""Rows reduced to buckets as they are decoded (tsd.query.decode.decode_buckets) against
downsampling whole series (decode_rows, assemble_spans, downsample).

Differential: random blocks of compacted and single cells (integers of every width, floats,
NaN, -0.0), random intervals dividing the hour and seeks, through the C helper and through
its numpy fallback, must give the very series downsample gives (bit for bit), or both
refuse the same rows (beyond their hour: RowsOutOfHour; unreadable: the decoder's error).
The same rows as the embedded store's decoded points (a PointBlock: _decode.c
``point_buckets``) too.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.query.test_decode import BASE, LAYOUT, METRIC, VALUES, _point, seconds_blocks
from tsd.codec import compact_row, encode_row_key
from tsd.errors import CodecError
from tsd.protocol.m_syntax import parse_downsample
from tsd.query import decode as decode_module
from tsd.query.decode import base_times_s, cell_buffers, decode_buckets, decode_rows
from tsd.query.downsample import RowBuckets, RowsOutOfHour, downsample, row_buckets
from tsd.query.series import SeriesBatch
from tsd.query.spans import Spans, assemble_spans
from tsd.storage.base import Block, Cell, CellBlock, PointBlock, Row

bucket_settings = settings(max_examples=150, deadline=None)

#: intervals that divide the hour, and the functions reduced per row
SPECS = st.sampled_from(["1s", "10s", "1m", "12m", "450s", "15m", "1h"]).flatmap(
    lambda interval: st.sampled_from(["sum", "zimsum", "pfsum", "avg", "count"]).map(
        lambda fn: f"{interval}-{fn}"
    )
)
ODD_VALUES = st.one_of(
    VALUES,
    st.sampled_from([math.nan, -0.0, 0.0, 1e300, -1e300, 0.5]),
    st.floats(width=32, allow_nan=False, allow_infinity=False),
)


@st.composite
def hour_blocks(draw: st.DrawFn) -> CellBlock:
    """Rows whose points all lie within their hour (compacted or single cells), with NaN
    and -0.0 among the values; unique keys, as any read gives them."""
    rows_: dict[bytes, Row] = {}
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        base_s = BASE + 3600 * draw(st.integers(min_value=0, max_value=3))
        n = draw(st.integers(min_value=1, max_value=40))
        step = draw(st.sampled_from([1, 10, 60, 0]))
        if step:
            start = draw(st.integers(0, 3599))
            offsets = list(range(start, min(3600, start + step * n), step))
        else:
            offsets = sorted(draw(st.sets(st.integers(0, 3599), min_size=n, max_size=n)))
        cells = [_cell(base_s, off, draw(ODD_VALUES)) for off in offsets]
        if draw(st.booleans()):
            compacted = compact_row(cells)
            assert compacted is not None
            cells = [compacted]
        tagv = bytes((0, 0, draw(st.integers(1, 3))))
        key = encode_row_key(LAYOUT, METRIC, base_s, [(b"\x00\x00\x01", tagv)])
        rows_[key] = Row(key, tuple(Cell("t", q, v) for q, v in cells))
    return CellBlock.from_rows(list(rows_.values()))


def _cell(base_s: int, offset_s: int, value: int | float) -> tuple[bytes, bytes]:
    """A seconds cell; NaN (which a put refuses, but a table may hold) as an 8-byte float."""
    if isinstance(value, float) and math.isnan(value):
        return ((offset_s << 4) | 0xF).to_bytes(2, "big"), struct.pack(">d", value)
    return _point(base_s, offset_s * 1000, value)


def _whole(block: CellBlock, buckets: RowBuckets) -> SeriesBatch:
    """The reference: series of points, then downsampled."""
    spans = assemble_spans([(block.keys, decode_rows(block, LAYOUT))], LAYOUT)
    return downsample(
        spans.batch,
        buckets.spec,
        start_ms=buckets.start_ms,
        end_ms=buckets.start_ms,
        query_start_ms=buckets.start_ms,
        query_end_ms=buckets.start_ms,
    )


def _as_points(block: CellBlock) -> PointBlock:
    """The block's rows as the embedded store's query read gives them: decoded points."""
    points = decode_rows(block, LAYOUT)
    counts = np.diff(points.row_offsets)
    base_ms = base_times_s(LAYOUT, block.keys) * 1000
    return PointBlock(
        block.keys,
        counts,
        points.timestamps - np.repeat(base_ms, counts),
        points.values,
        points.int_values,
        points.is_int,
        len(block),
        points.stored_bytes,
        lambda: block,
    )


def _by_rows(block: Block, buckets: RowBuckets, compiled: bool) -> Spans:
    helper = decode_module._C
    decode_module._C = helper if compiled else None
    try:
        return assemble_spans([(block.keys, decode_buckets(block, LAYOUT, buckets))], LAYOUT)
    finally:
        decode_module._C = helper


def _same(a: SeriesBatch, b: SeriesBatch) -> None:
    assert a.offsets.tolist() == b.offsets.tolist()
    assert a.timestamps.tolist() == b.timestamps.tolist()
    # bit for bit: NaN where NaN, -0.0 apart from 0.0
    assert a.values.view(np.int64).tolist() == b.values.view(np.int64).tolist()
    assert a.int_values is None
    assert b.int_values is None


def _check(block: CellBlock, spec: str, start_hours: int, start_s: int) -> None:
    start_ms = (BASE + 3600 * start_hours + start_s) * 1000
    buckets = row_buckets(parse_downsample(spec), start_ms)
    assert buckets is not None
    try:
        expected = _whole(block, buckets)
    except CodecError:
        for compiled in (True, False):
            with pytest.raises(CodecError):
                _by_rows(block, buckets, compiled)
        return
    points = decode_rows(block, LAYOUT).row_offsets
    for compiled, read in [(c, r) for c in (True, False) for r in (block, _as_points(block))]:
        spans = _by_rows(read, buckets, compiled)
        _same(spans.batch, expected)
        # the points each series had, as the whole path counts them
        whole = assemble_spans([(block.keys, decode_rows(block, LAYOUT))], LAYOUT)
        assert spans.point_lengths.tolist() == whole.batch.lengths.tolist()
        assert int(spans.point_lengths.sum()) == int(points[-1])


@pytest.mark.slow
@bucket_settings
@given(hour_blocks(), SPECS, st.integers(0, 2), st.integers(0, 3599))
def test_rows_reduced_to_buckets_are_the_downsampled_series(
    block: CellBlock, spec: str, start_hours: int, start_s: int
) -> None:
    _check(block, spec, start_hours, start_s)


@pytest.mark.slow
@bucket_settings
@given(seconds_blocks(), SPECS, st.integers(0, 2))
def test_odd_rows_are_reduced_as_whole_series_or_refused(
    block: CellBlock, spec: str, start_hours: int
) -> None:
    # Rows past their hour, unsorted, duplicated or corrupt cells (the C helper refuses
    # them): the numpy fallback answers as downsample does, or raises as the decoder does,
    # or RowsOutOfHour.
    assume(len(set(block.keys)) == len(block.keys))
    try:
        _check(block, spec, start_hours, 0)
    except RowsOutOfHour:
        points = decode_rows(block, LAYOUT)
        ends = (base_times_s(LAYOUT, block.keys) + 3600) * 1000
        row_end = np.repeat(ends, np.diff(points.row_offsets))
        assert (points.timestamps >= row_end).any()  # refused only past a row's hour


def test_a_point_beyond_its_hour_is_refused_by_both_paths() -> None:
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    # a 1-byte integer at 10 s and at 3,700 s (12-bit offsets reach 4,095 s)
    compacted = ((10 << 4).to_bytes(2, "big") + (3700 << 4).to_bytes(2, "big"), b"\x01\x02\x00")
    block = CellBlock.from_rows([Row(key, (Cell("t", *compacted),))])
    buckets = row_buckets(parse_downsample("1m-avg"), BASE * 1000)
    assert buckets is not None
    for compiled, read in [(c, r) for c in (True, False) for r in (block, _as_points(block))]:
        with pytest.raises(RowsOutOfHour):
            _by_rows(read, buckets, compiled)


def test_c_helper_reduces_compacted_rows() -> None:
    # Not a test that cannot fail: where a C compiler built it, the helper really answers.
    if decode_module._C is None:
        pytest.skip("tsd.query._decode not loaded (not built, or hidden by TSD_DISABLE_NATIVE)")
    values = [i + 0.5 if i % 3 else i for i in range(360)]
    compacted = compact_row([_point(BASE, 10_000 * i, v) for i, v in enumerate(values)])
    assert compacted is not None
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    block = CellBlock.from_rows([Row(key, (Cell("t", *compacted),))])
    base_ms = np.array([BASE * 1000], dtype=np.int64)
    found = decode_module._C.decode_buckets(*cell_buffers(block, base_ms), 60_000, BASE * 1000, 1)
    assert found is not None
    ts, avg, row_offsets, row_points = (
        np.frombuffer(x, dtype=d) for x, d in zip(found, ["<i8", "<f8", "<i8", "<i8"], strict=True)
    )
    assert row_offsets.tolist() == [0, 60]
    assert row_points.tolist() == [360]
    assert ts.tolist() == [(BASE + 60 * m) * 1000 for m in range(60)]
    assert avg.tolist() == [sum(values[6 * m : 6 * m + 6]) / 6 for m in range(60)]
    # the same row as decoded points
    offsets = np.arange(360, dtype=np.int64) * 10_000
    doubles = np.array(values, dtype=np.float64)
    counts = np.array([360], dtype=np.int64)
    again = decode_module._C.point_buckets(offsets, doubles, counts, base_ms, 60_000, 0, 1)
    assert again is not None
    assert [bytes(a) for a in again] == [bytes(a) for a in found]
    # a point at 3,600 s is its next hour's: refused, numpy's path then raises RowsOutOfHour
    offsets[-1] = 3_600_000
    assert decode_module._C.point_buckets(offsets, doubles, counts, base_ms, 60_000, 0, 1) is None


@pytest.mark.parametrize(
    ("spec", "reduced"),
    [
        ("1m-avg", True),
        ("1m-sum", True),
        ("1h-count", True),
        ("12m-zimsum", True),
        ("1m-max", False),  # not a running sum
        ("1m-avg-zero", False),  # fill: every bucket of the window
        ("11m-avg", False),  # does not divide the hour: buckets cross rows
        ("1mc-avg", False),  # calendar
        ("0all-sum", False),
        ("1d-avg", False),
    ],
)
def test_which_specs_are_reduced_row_by_row(spec: str, reduced: bool) -> None:
    assert (row_buckets(parse_downsample(spec), BASE * 1000) is not None) is reduced


def test_float32_values_reduce_as_doubles() -> None:
    # a 4-byte float widens exactly before it is summed (as OpenTSDB's doubles path)
    value = struct.unpack(">f", struct.pack(">f", 0.1))[0]
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    cells = [_point(BASE, off * 1000, value) for off in (0, 10, 20)]
    block = CellBlock.from_rows([Row(key, tuple(Cell("t", q, v) for q, v in cells))])
    _check(block, "1m-sum", 0, 0)


@pytest.mark.parametrize("function", ["sum", "avg"])
def test_a_bucket_of_negative_zeros_sums_to_zero_as_java_does(function: str) -> None:
    # OpenTSDB's runDouble sums from 0.0: -0.0 + -0.0 from there is 0.0. Buckets of unequal
    # lengths take the padded-block reduction, which folds from the first value.
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    values = [(0, -0.0), (10, -0.0), (60, 1.0), (70, 2.0), (80, 3.0)]
    block = CellBlock.from_rows(
        [Row(key, tuple(Cell("t", *_cell(BASE, off, v)) for off, v in values))]
    )
    _check(block, f"1m-{function}", 0, 0)
    buckets = row_buckets(parse_downsample(f"1m-{function}"), BASE * 1000)
    assert buckets is not None
    first = _whole(block, buckets).values[0]
    assert first == 0.0
    assert math.copysign(1.0, first) == 1.0


@pytest.mark.parametrize("spec", ["1m-avg", "1s-sum", "15m-count"])
def test_points_in_milliseconds_reduce_as_numpy_does(spec: str) -> None:
    # The store's decoded points carry ms offsets: bucket edges at the ms, the hour's last ms
    # kept, a point at 3,600,000 ms refused (RowsOutOfHour on both paths).
    key = encode_row_key(LAYOUT, METRIC, BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    offsets = [0, 1, 500, 999, 59_999, 60_000, 60_001, 1_799_999, 3_599_999]
    values = [1.5, -2.0, math.nan, 4.25, 1e300, -0.0, 7.0, 0.1, 3.0]

    def block(offs: list[int]) -> PointBlock:
        return PointBlock(
            [key],
            np.array([len(offs)], dtype=np.int64),
            np.array(offs, dtype=np.int64),
            np.array(values[: len(offs)], dtype=np.float64),
            None,
            None,
            1,
            0,
            lambda: CellBlock.empty(),
        )

    buckets = row_buckets(parse_downsample(spec), BASE * 1000)
    assert buckets is not None
    numpy_path = _by_rows(block(offsets), buckets, False).batch
    _same(_by_rows(block(offsets), buckets, True).batch, numpy_path)
    for compiled in (True, False):
        with pytest.raises(RowsOutOfHour):
            _by_rows(block([*offsets[:-1], 3_600_000]), buckets, compiled)
