"""The compiled ingest encoder (tsd/codec/_encode.c) against the Python loops it replaces:
the same cells, the same counts, the same errors, the same log record and head runs."""

from __future__ import annotations

import importlib.util
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec.qualifier import encode_points_into, python_encode_points_into
from tsd.codec.rowkey import KeyLayout, SeriesKey, make_series_key
from tsd.errors import CodecError
from tsd.wal.record import (
    decode_row_runs,
    encode_cells_and_runs,
    python_encode_cells_and_runs,
    read_records,
)

Encode = Callable[[dict[bytes, dict[bytes, bytes]], list[tuple[SeriesKey, int, Any]]], int]
_C = importlib.util.find_spec("tsd.codec._encode")
pytestmark = pytest.mark.skipif(_C is None, reason="the C helper is not built")

SERIES = [
    make_series_key(KeyLayout(), b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
    for i in range(3)
]
#: every kind of value and timestamp the encoder meets: the C helper's common cases and
#: their edges, and what it hands to encode_point (8-byte ints, ms timestamps, errors)
VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([127, 128, -128, -129, 32767, 32768, -32769, 2**31 - 1, 2**31, -(2**31)]),
    st.floats(allow_nan=False),
    st.floats(width=32),
    st.sampled_from([0.0, -0.0, 3.4028234663852886e38, 3.4028235677973366e38, 1e300, 5e-324]),
    st.just(float("nan")),
    st.just(True),
)
TIMESTAMPS = st.one_of(
    st.integers(0, 2**32 - 1),
    st.integers(2**32, 9_999_999_999_999),
    st.sampled_from([0, 3599, 3600, 2**32 - 1, -1]),
)
POINTS = st.lists(st.tuples(st.integers(0, 2), TIMESTAMPS, VALUES), max_size=20)


def run(
    encode: Encode, points: list[tuple[int, int, int | float]]
) -> tuple[object, dict[bytes, dict[bytes, bytes]]]:
    rows: dict[bytes, dict[bytes, bytes]] = {}
    try:
        outcome: object = encode(rows, [(SERIES[i], t, v) for i, t, v in points])
    except CodecError as exc:
        outcome = ("error", str(exc))
    return outcome, rows


@settings(max_examples=400, deadline=None)
@given(POINTS)
def test_points_encode_as_the_python_loop_does(points: list[tuple[int, int, int | float]]) -> None:
    """Cells, their count, and on a bad point its error with the points before it kept."""
    assert run(encode_points_into, points) == run(python_encode_points_into, points)


@settings(max_examples=200, deadline=None)
@given(POINTS)
def test_a_batch_frames_as_the_python_loop_does(points: list[tuple[int, int, int | float]]) -> None:
    _, rows = run(python_encode_points_into, points)
    record, runs = encode_cells_and_runs(rows)
    assert (record, runs) == python_encode_cells_and_runs(rows.items())
    records, _, why = read_records(record)
    assert why is None
    assert decode_row_runs(records[0][1]) == runs


def test_a_row_beyond_the_record_format_takes_the_python_path_and_its_error() -> None:
    rows = {b"r" * 70_000: {b"\x00\x10": b"\x01"}}
    with pytest.raises(struct.error, match="format requires") as c_error:
        encode_cells_and_runs(rows)
    with pytest.raises(struct.error) as python_error:
        python_encode_cells_and_runs(rows.items())
    assert str(c_error.value) == str(python_error.value)
