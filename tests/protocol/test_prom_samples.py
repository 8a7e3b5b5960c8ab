"""Remote write's hot loop (tsd/protocol/prom_samples.py): the compiled helpers
(``take_known_series``, ``series_fit`` and ``align_columns`` in tsd/protocol/_parse.c) answer
as their Python specifications on generated requests (known and unknown keys, in a dict or
a compact table, values finite or not, timestamps in and out of range, samples as the
protobuf runtime hands them out)."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.codec.rowkey import KeyLayout, make_series_key
from tsd.data_points import MAX_MS_TIMESTAMP, MAX_SECONDS_TIMESTAMP
from tsd.protocol.prom_samples import (
    MARK_TIMESTAMP,
    MARK_VALUE,
    align_samples,
    python_align_columns,
    python_series_fit,
    python_take_known_series,
    request_key,
    take_known_series,
)
from tsd.protocol.prom_wire import (
    TimeSeries,
    WriteColumns,
    WriteRequest,
    decode_key,
    decode_write_columns,
    snappy_compress,
)
from tsd.protocol.ref_table import PythonRefTable

P: Any = native.load("tsd.protocol._parse")
needs_c = pytest.mark.skipif(P is None, reason="tsd/protocol/_parse.c is not built")

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


def _request(
    samples: list[tuple[int, float, int]],
) -> tuple[list[bytes], list[bytes], np.ndarray, np.ndarray]:
    """A request of a sample per series as the handler takes it: each series' bytes (its
    key, one label ``series N``, then its sample's field) and its sample's bytes, as the
    runtime writes them, and the samples' columns."""
    series: list[bytes] = []
    payloads: list[bytes] = []
    for number, value, timestamp in samples:
        payload = TimeSeries().samples.add(value=value, timestamp=timestamp).SerializeToString()
        series.append(_field(1, 2, f"series {number}".encode()) + _field(2, 2, payload))
        payloads.append(payload)
    values_ = np.array([value for _, value, _ in samples], dtype=np.float64)
    timestamps_ = np.array([timestamp for _, _, timestamp in samples], dtype=np.int64)
    return series, payloads, values_, timestamps_


def _keys(columns: WriteColumns) -> list[bytes] | None:
    """Every series' key of a request read as columns, in order (None without columns)."""
    if columns.series is None:
        return None
    return [columns.key(index) for index in range(len(columns.series))]


def _is_mark(value: float) -> bool:
    return struct.pack("<d", value) == struct.pack("<d", MARK_VALUE)


def _bits(rows: dict[bytes, dict[bytes, bytes]]) -> dict[bytes, dict[bytes, bytes]]:
    return {row: dict(cells) for row, cells in rows.items()}


def _known(series: list[bytes], payloads: list[bytes], numbers: set[int], kind: str) -> Any:
    """The series numbered ``numbers`` known by key, in a dict or a compact table."""
    pairs = {}
    for index in range(len(series)):
        key = request_key(series, payloads, index)
        if _number(key) in numbers:
            pairs[key] = SERIES[_number(key) % 6]
    if kind == "dict":
        return pairs
    table = P.KeyTable(64) if kind == "KeyTable" else PythonRefTable(64)
    for key, ref in pairs.items():
        table.remember(key, ref)
    return table


@needs_c
@pytest.mark.slow  # many generated inputs
@settings(max_examples=300, deadline=None)
@given(
    requests,
    st.sets(st.integers(0, 7)),
    st.sampled_from(["dict", "KeyTable", "PythonRefTable"]),
    st.integers(0, 40),
    st.integers(0, 40),
)
def test_take_known_series_as_python(
    samples: list[tuple[int, float, int]], known_numbers: set[int], kind: str, a: int, b: int
) -> None:
    series, payloads, values_, timestamps_ = _request(samples)
    known = _known(series, payloads, known_numbers, kind)
    start, end = sorted((min(a, len(samples)), min(b, len(samples))))
    columns = (series, payloads, values_, timestamps_, known)
    c_list: list[Any] = []
    py_list: list[Any] = []
    c_taken = P.take_known_series(*columns, c_list, LOW, HIGH, start, end)
    py_taken = python_take_known_series(*columns, py_list, LOW, HIGH, start, end)
    assert c_taken == py_taken
    assert c_list == py_list
    assert c_taken[0] + len(c_taken[1]) == end - start
    assert all(start <= index < end for index in c_taken[1])
    assert len(c_list) == c_taken[0]


def _number(key: bytes) -> int:
    """The series number of a key (its one label, ``series N``)."""
    (label,) = decode_key(key) or []
    return int(label.split(b" ")[1])


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
    series, payloads, values_, timestamps_ = _request(samples)
    known = _known(series, payloads, {0, 2}, "dict")
    columns = (series, payloads, values_, timestamps_, known)
    taken: list[Any] = []
    n = len(samples)
    assert take_known_series(*columns, taken, LOW, HIGH, 0, n) == (2, [1, 2, 3, 4, 5])
    assert taken == [SERIES[0], SERIES[2]]
    assert take_known_series(*columns, [], LOW, HIGH, 2, 5) == (0, [2, 3, 4])
    with pytest.raises(ValueError, match="as many samples as series"):
        take_known_series(series, payloads, values_[:-1], timestamps_, known, [], LOW, HIGH, 0, n)
    with pytest.raises(ValueError, match="start <= end"):
        take_known_series(*columns, [], LOW, HIGH, 3, 2)
    with pytest.raises(ValueError, match="start <= end"):
        take_known_series(*columns, [], LOW, HIGH, 0, n + 1)
    with pytest.raises(ValueError, match="shorter than its sample"):
        take_known_series(
            [b"k"], [b"sample"], values_[:1], timestamps_[:1], {}, [], LOW, HIGH, 0, 1
        )


@needs_c
def test_the_compiled_take_wants_number_columns() -> None:
    """Values and timestamps are float64 and int64 columns: a list, or an array of another
    type, is a TypeError naming which; the cache a dict or a compact table."""
    series, payloads = [b"k\x12\x00"], [b""]
    ts = np.array([5], np.int64)
    with pytest.raises(TypeError, match="values must be a float64 column"):
        P.take_known_series(series, payloads, [1.5], ts, {}, [], LOW, HIGH, 0, 1)
    with pytest.raises(TypeError, match="timestamps must be an int64 column"):
        P.take_known_series(
            series, payloads, np.array([1.5]), np.array([5.0]), {}, [], LOW, HIGH, 0, 1
        )
    with pytest.raises(TypeError, match="bad arguments"):
        P.take_known_series(series, payloads, np.array([1.5]), ts, [], [], LOW, HIGH, 0, 1)


# --- a request's sample columns, read back from their marks -----------------------------

#: a column item: a mark, or a value / timestamp of a sample
column_values = st.lists(st.one_of(st.just(MARK_VALUE), values), max_size=30)
column_timestamps = st.lists(st.one_of(st.just(MARK_TIMESTAMP), timestamps), max_size=30)


def _reference_align(column: list[Any], count: int, is_mark: Any, missing: Any) -> Any:
    """Per mark, the last item behind it: the marks' rule one item at a time."""
    out: list[Any] = []
    for item in column:
        if is_mark(item):
            out.append(missing)
        elif not out:
            return None
        else:
            out[-1] = item
    return out if len(out) == count else None


def _is_mark_value(value: float) -> bool:
    return struct.pack("<d", value) == struct.pack("<d", MARK_VALUE)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(column_values, column_timestamps, st.integers(0, 12))
def test_align_samples_reads_the_marks_item_by_item(
    values_: list[float], timestamps_: list[int], count: int
) -> None:
    answer = align_samples(values_, timestamps_, count)
    want_values = _reference_align(values_, count, _is_mark_value, 0.0)
    want_timestamps = _reference_align(timestamps_, count, MARK_TIMESTAMP.__eq__, 0)
    if want_values is None or want_timestamps is None:
        assert answer is None
    else:
        assert answer is not None
        assert [struct.pack("<d", v) for v in answer[0].tolist()] == [
            struct.pack("<d", v) for v in want_values
        ]
        assert answer[1].tolist() == want_timestamps
        assert answer[0].dtype == np.float64
        assert answer[1].dtype == np.int64


@pytest.mark.slow
@needs_c
@settings(max_examples=400, deadline=None)
@given(column_values, column_timestamps, st.integers(0, 12))
def test_align_columns_compiled_answers_as_its_specification(
    values_: list[float], timestamps_: list[int], count: int
) -> None:
    columns = [np.array(values_, np.float64), np.array(timestamps_, np.int64)]
    theirs = [column.copy() for column in columns]
    aligned = P.align_columns(*columns, count)
    assert aligned == python_align_columns(theirs[0], theirs[1], count)
    if aligned:  # the same bits: a NaN's payload and -0.0 kept
        assert columns[0][:count].tobytes() == theirs[0][:count].tobytes()
        assert columns[1][:count].tolist() == theirs[1][:count].tolist()


@needs_c
def test_align_columns_compiled_refuses_what_it_cannot_align_in_place() -> None:
    values_, timestamps_ = np.array([MARK_VALUE, 1.5]), np.array([MARK_TIMESTAMP, 10])
    with pytest.raises(TypeError, match="values must be a float64 column"):
        P.align_columns(timestamps_, timestamps_, 1)
    with pytest.raises(TypeError, match="timestamps must be an int64 column"):
        P.align_columns(values_, values_, 1)
    values_.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        P.align_columns(values_, timestamps_, 1)
    with pytest.raises(ValueError, match="negative"):
        P.align_columns(np.array([1.5]), timestamps_, -1)


def test_align_samples_reads_each_sample_behind_its_mark() -> None:
    m, t = MARK_VALUE, MARK_TIMESTAMP
    # three samples: (1.5, 10), value left out (0.0), value and timestamp sent twice
    aligned = align_samples([m, 1.5, m, m, 2.0, 3.0], [t, 10, t, 11, t, 12, 13], 3)
    assert aligned is not None
    assert aligned[0].tolist() == [1.5, 0.0, 3.0]
    assert aligned[1].tolist() == [10, 11, 13]
    assert align_samples([m, 1.5], [t, 10], 2) is None  # fewer marks
    assert align_samples([1.5, m], [t, 10], 1) is None  # not led by a mark
    assert align_samples([m, m], [t, 10], 1) is None  # a sample's value is a mark's


def _field(number: int, wire: int, payload: bytes) -> bytes:
    """One protobuf field, as test data (tag, then a length for wire type 2)."""
    tag = _varint(number << 3 | wire)
    return tag + (_varint(len(payload)) + payload if wire == 2 else payload)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


#: a sample's fields, each a value (field 1, fixed64), a timestamp (field 2, varint) or an
#: unknown field (field 5, a string): any number of each, in any order
sample_fields = st.lists(
    st.one_of(
        values.map(lambda v: _field(1, 1, struct.pack("<d", v))),
        timestamps.map(lambda t: _field(2, 0, _varint(t))),
        st.binary(max_size=4).map(lambda b: _field(5, 2, b)),
    ),
    max_size=5,
)


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=300, deadline=None)
@given(st.lists(sample_fields, max_size=12))
def test_columns_read_as_the_full_message(samples: list[list[bytes]]) -> None:
    """Each sample's value and timestamp as the protobuf runtime reads the whole
    WriteRequest, whatever fields a sample leaves out, repeats or adds; or no columns at
    all when a field of a sample holds a mark's value or timestamp."""
    data = b"".join(
        _field(1, 2, _field(1, 2, f"l{i}".encode()) + _field(2, 2, b"".join(fields)))
        for i, fields in enumerate(samples)
    )
    columns = decode_write_columns(snappy_compress(data), 1 << 20)
    full = [series.samples[0] for series in WriteRequest.FromString(data).timeseries]
    keys = _keys(columns)
    if keys is None or columns.values is None or columns.timestamps is None:
        assert keys is None
        assert columns.values is None
        # some field of a sample (the last of its kind or not) holds a mark
        marks = {_field(1, 1, struct.pack("<d", MARK_VALUE)), _field(2, 0, _varint(MARK_TIMESTAMP))}
        assert any(field in marks for fields in samples for field in fields)
        return
    assert [struct.pack("<d", v) for v in columns.values.tolist()] == [
        struct.pack("<d", s.value) for s in full
    ]
    assert columns.timestamps.tolist() == [s.timestamp for s in full]
    assert [decode_key(key) for key in keys] == [[f"l{i}".encode()] for i in range(len(samples))]


def test_a_mark_in_a_field_read_over_is_still_found() -> None:
    """A sample whose first timestamp is a mark's and whose last is not: the columns
    miscount and the request is read the slow way, not misaligned."""
    sample = _field(1, 1, struct.pack("<d", 1.5)) + _field(2, 0, _varint(MARK_TIMESTAMP))
    sample += _field(2, 0, _varint(1_700_000_000_000))
    data = _field(1, 2, _field(1, 2, b"l") + _field(2, 2, sample))
    data += _field(1, 2, _field(1, 2, b"m") + _field(2, 2, _field(2, 0, _varint(5))))
    columns = decode_write_columns(snappy_compress(data), 1 << 20)
    assert _keys(columns) is None
    assert columns.values is None
    assert columns.timestamps is None


# --- a request's series keys: each series without its sample's field --------------------

#: a sample's bytes: a value and a timestamp as Prometheus writes them
sample_payloads = st.tuples(values, timestamps).map(
    lambda vt: _field(1, 1, struct.pack("<d", vt[0])) + _field(2, 0, _varint(vt[1]))
)
#: a label's bytes: a name and a value, or bytes that look like a sample's field (what a
#: sender could put in a label to make a series seem to end with a sample)
label_payloads = st.one_of(
    st.binary(max_size=6).map(lambda b: _field(1, 2, b"n") + _field(2, 2, b)),
    sample_payloads.map(lambda p: _field(2, 2, p)),
    sample_payloads.map(lambda p: _field(1, 2, b"n") + _field(2, 2, _field(2, 2, p))),
)
#: a series: its labels' fields and its samples' fields (mostly one; none or two), in any
#: order when ``shuffled`` (now and then)
series_shapes = st.tuples(
    st.lists(label_payloads, max_size=3),
    st.one_of(
        st.lists(sample_payloads, min_size=1, max_size=1),
        st.lists(sample_payloads, min_size=1, max_size=1),
        st.lists(sample_payloads, max_size=2),
    ),
    st.sampled_from([False, False, False, True]),
)


def _series_bytes(labels: list[bytes], samples: list[bytes], shuffled: bool) -> bytes:
    fields = [_field(1, 2, label) for label in labels] + [_field(2, 2, s) for s in samples]
    if shuffled:
        fields.reverse()
    return b"".join(fields)


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=400, deadline=None)
@given(st.lists(series_shapes, max_size=6))
def test_keys_are_taken_only_for_a_sample_per_series(
    shapes: list[tuple[list[bytes], list[bytes], bool]],
) -> None:
    """Whatever the series hold (no sample, two, labels made to look like samples, fields
    out of order): when the columns have keys and every key is one (decode_key), each
    series has exactly one sample, its key decodes to its labels and its sample is the
    one in the columns."""
    data = b"".join(_field(1, 2, _series_bytes(*shape)) for shape in shapes)
    columns = decode_write_columns(snappy_compress(data), 1 << 20)
    keys = _keys(columns)
    if keys is None:
        return
    labels = [decode_key(key) for key in keys]
    if any(one is None for one in labels):
        return  # the handler reads the request the slow way
    full = list(WriteRequest.FromString(data).timeseries)
    assert all(len(series.samples) == 1 for series in full)
    assert labels == [list(series.labels) for series in full]
    assert columns.values is not None
    assert columns.timestamps is not None
    assert [struct.pack("<d", v) for v in columns.values.tolist()] == [
        struct.pack("<d", series.samples[0].value) for series in full
    ]
    assert columns.timestamps.tolist() == [series.samples[0].timestamp for series in full]


def test_a_label_that_ends_like_a_sample_is_not_taken_for_one() -> None:
    """A series without samples whose last label ends with the bytes of the next series'
    first sample (which has two): its key cuts a label short and is not a key; the second
    series' key holds a sample and is not one either."""
    first = _field(1, 1, struct.pack("<d", 1.5)) + _field(2, 0, _varint(1_700_000_000_000))
    second = _field(1, 1, struct.pack("<d", 2.5)) + _field(2, 0, _varint(1_700_000_000_001))
    label = _field(1, 2, b"n") + _field(2, 2, b"v" + _field(2, 2, first))
    data = _field(1, 2, _field(1, 2, label))
    data += _field(
        1, 2, _field(1, 2, _field(1, 2, b"m")) + _field(2, 2, first) + _field(2, 2, second)
    )
    columns = decode_write_columns(snappy_compress(data), 1 << 20)
    keys = _keys(columns)
    assert keys is not None  # the bytes line up ...
    assert [decode_key(key) for key in keys] == [None, None]  # ... the keys do not


#: lists of bytes for series_fit: series, payloads and fields, made to agree or not
key_inputs = st.lists(st.tuples(st.binary(max_size=8), st.binary(max_size=5)), max_size=8)


@pytest.mark.slow
@pytest.mark.fallbacks
@needs_c
@settings(max_examples=400, deadline=None)
@given(key_inputs, st.integers(0, 3), st.binary(max_size=2))
def test_series_fit_as_python(pairs: list[tuple[bytes, bytes]], tweak: int, extra: bytes) -> None:
    """The compiled series_fit answers as python_series_fit, on series that end with
    their field (their keys then what comes before) and on series, payloads or fields that
    do not agree."""
    payloads = [payload for _, payload in pairs]
    fields_list = [bytes((0x12, len(p))) + p for p in payloads]
    series = [prefix + field for (prefix, _), field in zip(pairs, fields_list, strict=True)]
    fields = b"".join(fields_list)
    if tweak == 1:
        fields += extra  # the sum differs (unless extra is empty)
    elif tweak == 2 and series:
        series[-1] = series[-1][:-1] + extra[:1]  # the last series ends otherwise
    elif tweak == 3:
        payloads = payloads[:-1]  # fewer payloads
    want = python_series_fit(series, payloads, fields)
    assert P.series_fit(series, payloads, fields) is want
    if tweak == 0:
        assert want
        keys = [request_key(series, payloads, i) for i in range(len(series))]
        assert keys == [prefix for prefix, _ in pairs]
    with pytest.raises(TypeError):
        P.series_fit(series, payloads, bytearray(fields))
