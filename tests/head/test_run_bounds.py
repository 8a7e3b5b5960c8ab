"""The head's check of a batch's runs (is each run's time strictly increasing, its first and
last offset), with each run's lengths (run_columns): the compiled helper answers as its
numpy specification (python_run_columns, python_run_bounds) on runs encoded by the codec,
seconds, milliseconds, both mixed, repeats and empty runs; and the join of a row's runs when
a batch holds the row more than once (compiled and python_join_repeated_rows agree)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.codec import encode_point
from tsd.codec.row_runs import python_join_repeated_rows
from tsd.head.head import (
    Run,
    _offset_bounds,
    join_repeated_rows,
    prefix_groups,
    python_prefix_groups,
    python_run_bounds,
    python_run_columns,
    run_columns,
)

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
    assert C.run_columns([run, as_view]) is None
    assert list(_offset_bounds([as_view])) == [(True, 0, 1000)]


@pytest.mark.slow
@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(OFFSETS, max_size=6), max_size=12))
def test_compiled_columns_answer_as_numpy(runs_of_stamps: list[list[int]]) -> None:
    """run_columns (the head's numbers of a batch in one buffer) is, per run, its cells,
    its qualifiers' and values' lengths, then its bounds as python_run_bounds gives them."""
    runs = [_run(row, stamps) for row, stamps in enumerate(runs_of_stamps)]
    packed = C.run_columns(runs)
    assert isinstance(packed, bytes)
    compiled = np.frombuffer(packed, np.int64).reshape(len(runs), 6)
    expected = [
        [run[1], len(run[2]), len(run[3]), int(ok), first, last]
        for run, (ok, first, last) in zip(runs, python_run_bounds(runs), strict=True)
    ]
    assert compiled.tolist() == expected
    assert python_run_columns(runs).reshape(len(runs), 6).tolist() == expected
    assert run_columns(runs).tolist() == expected


@needs_c
def test_runs_of_other_types_get_their_columns_from_numpy() -> None:
    run = _run(1, [BASE, BASE + 1])
    as_view: Any = (run[0], run[1], memoryview(run[2]), run[3])
    values_view: Any = (run[0], run[1], run[2], memoryview(run[3]))
    assert C.run_columns([run, as_view]) is None
    assert C.run_columns([values_view]) is None
    assert C.run_columns([run[:3]]) is None
    expected = [[2, 4, len(run[3]), 1, 0, 1000]] * 2
    assert run_columns([run, as_view]).tolist() == expected
    assert run_columns([values_view, run]).tolist() == expected


@pytest.mark.slow
@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.lists(OFFSETS, max_size=4)), max_size=16))
def test_compiled_join_answers_as_python(rows_and_stamps: list[tuple[int, list[int]]]) -> None:
    runs = [_run(row, stamps) for row, stamps in rows_and_stamps]
    compiled = C.join_repeated_rows(runs)
    assert compiled == python_join_repeated_rows(runs)
    assert len({run[0] for run in compiled}) == len(compiled)


def test_a_repeated_row_is_joined_in_order_where_it_first_came() -> None:
    a1, b, a2, a3 = _run(1, [BASE]), _run(2, [BASE]), _run(1, [BASE + 2]), _run(1, [BASE + 1])
    assert join_repeated_rows([a1, b, a2, a3]) == [
        (a1[0], 3, a1[2] + a2[2] + a3[2], a1[3] + a2[3] + a3[3]),
        b,
    ]


@needs_c
def test_runs_of_other_types_are_joined_by_python() -> None:
    run = _run(1, [BASE, BASE + 1])
    as_view: Any = (run[0], run[1], memoryview(run[2]), run[3])
    assert C.join_repeated_rows([run, as_view]) is None
    assert C.join_repeated_rows([run, [*run]]) is None
    assert join_repeated_rows([run, as_view]) == python_join_repeated_rows([run, as_view])


@pytest.mark.slow
@pytest.mark.fallbacks
@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=5), max_size=10), st.integers(0, 4))
def test_compiled_prefix_groups_answer_as_python(keys: list[bytes], end: int) -> None:
    """A batch's new rows by group (the keys' first ``end`` bytes): the compiled helper
    and its specification give the same heads in the same order and the same numbers;
    keys shorter than end go to Python."""
    keys = [b"ab"[: end % 3] + key for key in keys]  # often a prefix in common
    spec_heads, spec_index = python_prefix_groups(keys, end)
    found = C.prefix_groups(keys, end)
    if any(len(key) < end for key in keys):
        assert found is None
    else:
        assert found is not None
        assert (found[0], np.frombuffer(found[1], np.int64).tolist()) == (
            spec_heads,
            spec_index.tolist(),
        )
    heads, index = prefix_groups(keys, end)
    assert (heads, index.tolist()) == (spec_heads, spec_index.tolist())
    assert [heads[i] for i in index.tolist()] == [key[:end] for key in keys]


@needs_c
def test_keys_of_other_types_or_many_heads_are_grouped_by_python() -> None:
    keys: Any = [b"abc", bytearray(b"abd"), b"abe"]
    assert C.prefix_groups(keys, 2) is None
    heads, index = prefix_groups(keys, 3)
    assert (heads, index.tolist()) == ([b"abc", b"abd", b"abe"], [0, 1, 2])
    many = [i.to_bytes(2, "big") for i in range(100)] * 2  # past the compiled helper's 64
    assert C.prefix_groups(many, 2) is None
    heads, index = prefix_groups(many, 2)
    assert (heads, index.tolist()) == (many[:100], list(range(100)) * 2)
