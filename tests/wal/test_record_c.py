"""The compiled framing of a writer batch (tsd/wal/_record.c encode_cells_and_runs)
against the Python loop it replaces: the same log payload and head runs, the same error;
and of remote write's samples (series, and timestamps and values as columns): a request's
payload, a row each (encode_samples_payload), and a batch's requests as the head's runs, a
run a row (sample_runs), against their specifications."""

from __future__ import annotations

import gc
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.codec import KeyLayout, SeriesKey, make_series_key
from tsd.codec.qualifier import encode_points_into
from tsd.codec.row_runs import python_join_repeated_rows
from tsd.wal.record import (
    SampleBlock,
    decode_cells,
    decode_row_runs,
    encode_payload_and_runs,
    encode_samples_payload,
    python_encode_payload_and_runs,
    python_encode_samples_part,
    python_encode_samples_payload,
    python_sample_runs,
    sample_runs,
)

pytestmark = pytest.mark.skipif(
    native.load("tsd.wal._record") is None, reason="the C helper is not built or is hidden"
)

CELLS = st.dictionaries(
    st.binary(min_size=2, max_size=4), st.binary(min_size=1, max_size=8), min_size=1, max_size=5
)
ROWS = st.dictionaries(st.binary(min_size=1, max_size=20), CELLS, max_size=12)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@given(ROWS)
def test_a_batch_frames_as_the_python_loop_does(rows: dict[bytes, dict[bytes, bytes]]) -> None:
    payload, runs = encode_payload_and_runs(rows)
    assert (payload, runs) == python_encode_payload_and_runs(rows.items())
    assert decode_row_runs(payload) == runs


def test_a_row_beyond_the_record_format_takes_the_python_path_and_its_error() -> None:
    rows = {b"r" * 70_000: {b"\x00\x10": b"\x01"}}
    with pytest.raises(struct.error, match="format requires") as c_error:
        encode_payload_and_runs(rows)
    with pytest.raises(struct.error) as python_error:
        python_encode_payload_and_runs(rows.items())
    assert str(c_error.value) == str(python_error.value)


def test_runs_are_left_to_reference_counting() -> None:
    """A run holds bytes and an int: the cyclic collector would untrack it at its first
    pass; made untracked, a burst's runs (a row each) are not walked first."""
    rows = {b"row1": {b"\x00\x10": b"\x01"}, b"row2": {b"\x00\x10": b"\x01", b"\x00\x20": b"\x02"}}
    _, runs = encode_payload_and_runs(rows)
    assert len(runs) == 2
    assert not any(map(gc.is_tracked, runs))


SERIES = [
    make_series_key(KeyLayout(), b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
    for i in range(4)
]
#: (series, timestamp, value) as remote write takes them: seconds and milliseconds, floats of
#: both widths and integral ones (and, out of range or not finite, what only encode_point
#: handles)
SAMPLES = st.lists(
    st.tuples(
        st.sampled_from(SERIES),
        st.one_of(
            st.integers(1_356_998_400, 1_356_998_400 + 7_200),
            st.integers(1_700_000_000_000, 1_700_000_000_000 + 7_200_000),
        ),
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from([0.0, 1.0, -1.0, 127.0, 128.0, 2.0**31, 0.5, 1.1, -0.0]),
        ),
    ),
    max_size=30,
)


def _columns(samples: list[tuple[SeriesKey, int, float]]) -> SampleBlock:
    series = [one for one, _, _ in samples]
    timestamps = np.array([t for _, t, _ in samples], dtype=np.int64)
    values = np.array([v for _, _, v in samples], dtype=np.float64)
    return SampleBlock(series, timestamps, values)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@given(SAMPLES)
def test_samples_a_row_each_frame_as_the_python_loop_does(
    samples: list[tuple[SeriesKey, int, float]],
) -> None:
    """The log record of a remote write request: the specification's payload byte for
    byte, a row of one cell per sample in order, holding the cells the rows' encoder makes
    of the same points (a later point of a cell winning when the rows are read back in
    order)."""
    payload = encode_samples_payload(*_columns(samples))
    assert payload == python_encode_samples_payload(*_columns(samples))
    runs = python_encode_samples_part(*_columns(samples))[1]
    assert decode_row_runs(payload) == runs
    assert [count for _, count, _, _ in runs] == [1] * len(samples)
    rows: dict[bytes, dict[bytes, bytes]] = {}
    encode_points_into(rows, samples)
    replayed: dict[bytes, dict[bytes, bytes]] = {}
    for row, cells in decode_cells(payload):
        replayed.setdefault(row, {}).update(cells)
    assert replayed == rows


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(SAMPLES, max_size=4))
def test_a_batch_of_requests_becomes_a_run_a_row_as_the_head_joins_them(
    requests: list[list[tuple[SeriesKey, int, float]]],
) -> None:
    """A writer batch's requests as the head takes them: the specification's runs, which
    are the runs of their log records joined as the head joins a row that comes more than
    once (its cells in the order they came)."""
    blocks = [_columns(samples) for samples in requests]
    runs = sample_runs(blocks)
    assert runs == python_sample_runs(blocks)
    one_by_one = [
        run for block in blocks for run in decode_row_runs(encode_samples_payload(*block))
    ]
    assert runs == python_join_repeated_rows(one_by_one)
    assert not any(map(gc.is_tracked, runs))


def test_a_sample_twice_comes_twice_the_later_last() -> None:
    ms = 1_700_000_000_123
    samples = [(SERIES[0], ms, 1.5), (SERIES[1], ms, 2.0), (SERIES[0], ms, 2.5)]
    block = _columns(samples)
    runs = decode_row_runs(encode_samples_payload(*block))
    row = SERIES[0].row_key(row_base(ms))
    assert [run[0] for run in runs] == [row, SERIES[1].row_key(row_base(ms)), row]
    assert runs[0][2] == runs[2][2]  # the same cell: the later one comes later
    assert runs[0][3] != runs[2][3]
    joined = sample_runs([block])
    assert [(run[0], run[1]) for run in joined] == [(row, 2), (SERIES[1].row_key(row_base(ms)), 1)]
    assert joined[0][2] == runs[0][2] * 2
    assert joined[0][3] == runs[0][3] + runs[2][3]


def test_samples_come_as_number_columns_of_as_many() -> None:
    """Timestamps int64, values float64, as many of each as series: anything else is a
    TypeError or a ValueError, from the helpers as from the specification."""
    series, timestamps, values = _columns([(SERIES[0], 1_700_000_000_123, 1.5)])
    floats32 = SampleBlock(series, timestamps, values.astype(np.float32))
    floats_ts = SampleBlock(series, timestamps.astype(np.float64), values)
    for encode in (encode_samples_payload, lambda *block: sample_runs([SampleBlock(*block)])):
        with pytest.raises(TypeError, match="values must be a float64 column"):
            encode(*floats32)
        with pytest.raises(TypeError, match="timestamps must be an int64 column"):
            encode(*floats_ts)
    for encode in (
        encode_samples_payload,
        python_encode_samples_payload,
        lambda *block: sample_runs([SampleBlock(*block)]),
        lambda *block: python_sample_runs([SampleBlock(*block)]),
    ):
        with pytest.raises(ValueError, match="as many samples as series"):
            encode(series * 2, timestamps, values)


def row_base(ms: int) -> int:
    return ms // 1000 // 3600 * 3600
