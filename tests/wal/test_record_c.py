"""The compiled framing of a writer batch (tsd/wal/_record.c encode_cells_and_runs and
encode_cells_payload) against the Python loop it replaces: the same log payload and head
runs, the same error."""

from __future__ import annotations

import gc
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.wal.record import (
    decode_row_runs,
    encode_payload,
    encode_payload_and_runs,
    python_encode_payload_and_runs,
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
    assert encode_payload(rows) == payload  # the payload alone (C encode_cells_payload)


def test_a_row_beyond_the_record_format_takes_the_python_path_and_its_error() -> None:
    rows = {b"r" * 70_000: {b"\x00\x10": b"\x01"}}
    with pytest.raises(struct.error, match="format requires") as c_error:
        encode_payload_and_runs(rows)
    with pytest.raises(struct.error) as python_error:
        python_encode_payload_and_runs(rows.items())
    assert str(c_error.value) == str(python_error.value)
    with pytest.raises(struct.error, match="format requires"):
        encode_payload(rows)


def test_runs_are_left_to_reference_counting() -> None:
    """A run holds bytes and an int: the cyclic collector would untrack it at its first
    pass; made untracked, a burst's runs (a row each) are not walked first."""
    rows = {b"row1": {b"\x00\x10": b"\x01"}, b"row2": {b"\x00\x10": b"\x01", b"\x00\x20": b"\x02"}}
    _, runs = encode_payload_and_runs(rows)
    assert len(runs) == 2
    assert not any(map(gc.is_tracked, runs))
