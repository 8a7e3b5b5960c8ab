"""The head's check of a batch's runs (is each run's time strictly increasing, its first and
last offset): the compiled helper answers as its numpy specification, python_run_bounds,
on runs encoded by the codec, seconds, milliseconds, both mixed, repeats and empty runs."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.codec import encode_point
from tsd.head.head import Run, _offset_bounds, python_run_bounds

C: Any = native.load("tsd.head._runs")

needs_c = pytest.mark.skipif(C is None, reason="tsd/head/_runs.c is not built")

BASE = 1356998400
#: a point's time in the hour of BASE: seconds, or milliseconds (13 digits)
OFFSETS = st.one_of(
    st.integers(BASE, BASE + 3599),
    st.integers(BASE * 1000, BASE * 1000 + 3_599_999),
)


def _run(row: int, stamps: list[int]) -> Run:
    """A run as the writer's batch frames it: the points' qualifiers and values joined."""
    cells = [encode_point(stamp, 1)[1:] for stamp in stamps]
    return (
        row.to_bytes(13, "big"),
        len(cells),
        b"".join(q for q, _ in cells),
        b"".join(v for _, v in cells),
    )


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(OFFSETS, max_size=6), max_size=12))
def test_compiled_bounds_answer_as_numpy(runs_of_stamps: list[list[int]]) -> None:
    runs = [_run(row, stamps) for row, stamps in enumerate(runs_of_stamps)]
    compiled = C.run_bounds(runs)
    assert compiled == list(python_run_bounds(runs))
    assert list(_offset_bounds(runs)) == compiled


def test_increasing_repeated_and_mixed_runs() -> None:
    runs = [
        _run(1, [BASE, BASE + 1, BASE + 3599]),  # seconds, increasing
        _run(2, [BASE + 5, BASE + 5]),  # the same time again
        _run(3, [BASE * 1000 + 7, BASE * 1000 + 8]),  # milliseconds, increasing
        _run(4, [BASE + 1, BASE * 1000 + 2000]),  # seconds and milliseconds: single cells
        _run(5, [BASE + 9, BASE + 2]),  # out of order
        _run(6, []),  # nothing (a row whose points were all replaced)
    ]
    assert list(_offset_bounds(runs)) == [
        (True, 0, 3_599_000),
        (False, 5000, 5000),
        (True, 7, 8),
        (False, 0, 0),
        (False, 9000, 2000),
        (False, 0, 0),
    ]


@needs_c
def test_runs_of_other_types_go_to_numpy() -> None:
    run = _run(1, [BASE, BASE + 1])
    as_view: Any = (run[0], run[1], memoryview(run[2]), run[3])
    assert C.run_bounds([run, as_view]) is None
    assert list(_offset_bounds([as_view])) == [(True, 0, 1000)]
