"""Remote write's hot loop (tsd/protocol/prom_samples.py): the compiled helper
(``take_known_samples`` in tsd/protocol/_parse.c) answers as its Python specification on
generated requests (known and unknown keys, values finite or not, timestamps in and out of
range, samples as the protobuf runtime hands them out), into a batch's cells and into a
list; and the compiled merge of a request's cells into a batch (tsd/codec/_encode.c
``merge_rows``) as python_merge_rows."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.codec.qualifier import ENCODER_TABLES, merge_rows, python_merge_rows
from tsd.codec.rowkey import KeyLayout, make_series_key
from tsd.data_points import MAX_MS_TIMESTAMP, MAX_SECONDS_TIMESTAMP
from tsd.protocol.prom_samples import python_take_known_samples, take_known_samples
from tsd.protocol.prom_wire import WriteRequest, decode_key, decode_write_columns, snappy_compress

P: Any = native.load("tsd.protocol._parse")
C: Any = native.load("tsd.codec._encode")
needs_c = pytest.mark.skipif(
    P is None or C is None, reason="tsd/protocol/_parse.c or tsd/codec/_encode.c is not built"
)

LOW, HIGH = MAX_SECONDS_TIMESTAMP, MAX_MS_TIMESTAMP
SERIES = [
    make_series_key(KeyLayout(), b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
    for i in range(6)
]
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e300, math.nan, math.inf, -math.inf]),
)
timestamps = st.one_of(
    st.integers(LOW - 5, LOW + 5),
    st.integers(HIGH - 5, HIGH + 5),
    st.integers(1_600_000_000_000, 1_800_000_000_000),
    st.integers(-(2**63), 2**63 - 1),
)
#: (series number, value, timestamp); series numbers 0-5, known or not as drawn
requests = st.lists(st.tuples(st.integers(0, 7), values, timestamps), max_size=40)


def _columns(samples: list[tuple[int, float, int]]) -> tuple[list[bytes], Any]:
    """A request of a sample per series, read as the handler reads it."""
    request = WriteRequest()
    for number, value, timestamp in samples:
        series = request.timeseries.add()
        series.labels.append(f"series {number}".encode())  # any bytes: a key
        series.samples.add(value=value, timestamp=timestamp)
    columns = decode_write_columns(snappy_compress(request.SerializeToString()), 1 << 20)
    assert columns.samples is not None or not samples
    return columns.keys, [] if columns.samples is None else list(columns.samples)


def _bits(rows: dict[bytes, dict[bytes, bytes]]) -> dict[bytes, dict[bytes, bytes]]:
    return {row: dict(cells) for row, cells in rows.items()}


def _point_bits(points: list[tuple[Any, int, float]]) -> list[tuple[Any, int, bytes]]:
    return [(s, t, struct.pack(">d", v)) for s, t, v in points]


@needs_c
@pytest.mark.slow  # many generated inputs
@settings(max_examples=300, deadline=None)
@given(requests, st.sets(st.integers(0, 7)))
def test_take_known_samples_as_python(
    samples: list[tuple[int, float, int]], known_numbers: set[int]
) -> None:
    keys, messages = _columns(samples)
    known = {key: SERIES[_number(key) % 6] for key in keys if _number(key) in known_numbers}
    c_rows: dict[bytes, dict[bytes, bytes]] = {}
    py_rows: dict[bytes, dict[bytes, bytes]] = {}
    c_answer = P.take_known_samples(keys, messages, known, c_rows, LOW, HIGH, *_tables())
    py_answer = python_take_known_samples(keys, messages, known, py_rows, LOW, HIGH)
    assert c_answer == py_answer
    assert _bits(c_rows) == _bits(py_rows)
    c_list: list[tuple[Any, int, float]] = []
    py_list: list[tuple[Any, int, float]] = []
    c_taken = P.take_known_samples(keys, messages, known, c_list, LOW, HIGH, *_tables())
    py_taken = python_take_known_samples(keys, messages, known, py_list, LOW, HIGH)
    assert c_taken == py_taken
    assert _point_bits(c_list) == _point_bits(py_list)
    assert c_taken[0] + len(c_taken[2]) == len(samples)


def _number(key: bytes) -> int:
    """The series number of a key (its one label, ``series N``)."""
    (label,), _ = decode_key(key)
    return int(label.split(b" ")[1])


def _tables() -> tuple[Any, ...]:
    return ENCODER_TABLES


def test_what_is_not_taken_is_left_by_index() -> None:
    """Unknown series, values that are not finite and timestamps OpenTSDB would misread
    are left to the caller, in order; the rest is encoded as milliseconds."""
    good = 1_700_000_000_123
    samples = [
        (0, 1.5, good),  # taken
        (1, 2.0, good),  # unknown series
        (0, math.nan, good),
        (0, math.inf, good + 1),
        (0, 3.0, LOW),  # would read as seconds
        (0, 4.0, HIGH + 1),
        (2, 0.0, good + 2),  # taken: a zero
    ]
    keys, messages = _columns(samples)
    known = {key: SERIES[_number(key)] for key in keys if _number(key) in (0, 2)}
    rows: dict[bytes, dict[bytes, bytes]] = {}
    taken, cells, others = take_known_samples(keys, messages, known, rows, LOW, HIGH)
    assert (taken, cells, others) == (2, 2, [1, 2, 3, 4, 5])
    points: list[tuple[Any, int, float]] = []
    assert take_known_samples(keys, messages, known, points, LOW, HIGH) == (2, 0, others)
    assert points == [(SERIES[0], good, 1.5), (SERIES[2], good + 2, 0.0)]
    with pytest.raises(ValueError, match="as many samples as keys"):
        take_known_samples(keys, messages[:-1], known, points, LOW, HIGH)


@needs_c
@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.binary(min_size=1, max_size=3),
            st.dictionaries(st.binary(min_size=2, max_size=2), st.binary(max_size=2), max_size=3),
            max_size=4,
        ),
        max_size=5,
    )
)
def test_merge_rows_as_python(requests: list[dict[bytes, dict[bytes, bytes]]]) -> None:
    c_into: dict[bytes, dict[bytes, bytes]] = {}
    py_into: dict[bytes, dict[bytes, bytes]] = {}
    for rows in requests:
        c_added = C.merge_rows(c_into, {r: dict(c) for r, c in rows.items()})
        py_added = python_merge_rows(py_into, {r: dict(c) for r, c in rows.items()})
        assert c_added == py_added
    assert c_into == py_into


def test_merge_rows_later_cells_win() -> None:
    into = {b"r": {b"q1": b"a"}}
    later = {b"r": {b"q1": b"b", b"q2": b"c"}, b"s": {b"q": b"d"}}
    assert merge_rows(into, later) == 2
    assert into == {b"r": {b"q1": b"b", b"q2": b"c"}, b"s": {b"q": b"d"}}
    assert into[b"s"] is later[b"s"]  # taken over, not copied
