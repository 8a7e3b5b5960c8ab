"""A snapshot's rows parted into their qualifiers and their values: the compiled helper
(``join_parts`` in tsd/head/_runs.c) answers as its specification, python_join_parts, and
leaves to it what it does not take (rows whose lengths do not add up, other types)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.head.head import (
    _join_parts,
    _picked,
    _picked_at,
    append_rows,
    python_append_rows,
    python_join_parts,
)

C: Any = native.load("tsd.head._runs")

needs_c = pytest.mark.skipif(C is None, reason="tsd/head/_runs.c is not built")

ROWS = st.lists(st.tuples(st.binary(max_size=24), st.binary(max_size=48)), max_size=40)


@pytest.mark.slow
@pytest.mark.fallbacks
@needs_c
@settings(max_examples=300, deadline=None)
@given(rows=ROWS, as_bytes=st.booleans())
def test_the_helper_parts_rows_as_the_spec_does(
    rows: list[tuple[bytes, bytes]], as_bytes: bool
) -> None:
    bufs: list[Any] = [(bytes if as_bytes else bytearray)(q + v) for q, v in rows]
    q_lens = np.array([len(q) for q, _ in rows], dtype=np.int64)
    v_lens = np.array([len(v) for _, v in rows], dtype=np.int64)
    want = (b"".join(q for q, _ in rows), b"".join(v for _, v in rows))
    assert C.join_parts(bufs, q_lens, v_lens) == want
    assert python_join_parts(bufs, q_lens, v_lens) == want
    assert _join_parts(bufs, q_lens, v_lens) == want


@needs_c
def test_rows_the_helper_does_not_take_are_left_to_the_spec() -> None:
    one = np.array([1], dtype=np.int64)
    assert C.join_parts([bytearray(b"abc")], one, one) is None  # 3 bytes, not 1 + 1
    assert C.join_parts(["ab"], one, one) is None  # not bytes
    assert C.join_parts([b"ab", b"cd"], one, one) is None  # lengths of one row, not two
    assert C.join_parts([b"ab"], one, np.array([-1], dtype=np.int64)) is None
    assert C.join_parts([], np.zeros(0, np.int64), np.zeros(0, np.int64)) == (b"", b"")


@pytest.mark.slow
@pytest.mark.fallbacks
@needs_c
@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.binary(max_size=8), min_size=1, max_size=30), data=st.data())
def test_the_helper_picks_rows_as_the_spec_does(items: list[bytes], data: st.DataObject) -> None:
    at = data.draw(st.lists(st.integers(0, len(items) - 1), max_size=40))
    want = [items[i] for i in at]
    slots = np.array(at, dtype=np.int64)
    assert C.picked(items, slots) == want
    assert _picked(items, at) == want
    assert _picked_at(items, slots) == want


@needs_c
def test_an_index_the_helper_cannot_pick_is_left_to_the_spec() -> None:
    items = [b"a", b"b"]
    assert C.picked(items, np.array([0, 2], dtype=np.int64)) is None
    assert C.picked(items, np.array([-1], dtype=np.int64)) is None
    with pytest.raises(IndexError):
        _picked_at(items, np.array([0, 5], dtype=np.int64))


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(max_size=12), st.binary(max_size=8), st.binary(max_size=8)),
        min_size=1,
        max_size=10,
    ),
    st.data(),
)
def test_points_appended_to_rows_as_the_spec_appends_them(
    rows: list[tuple[bytes, bytes, bytes]], data: st.DataObject
) -> None:
    """append_rows (compiled where built) gives each row the bytes python_append_rows
    gives it: the run's qualifiers at the end of the row's, its values at the end."""
    bufs: list[bytes | None] = [row for row, _, _ in rows]
    at = [data.draw(st.integers(0, len(row))) for row, _, _ in rows]
    runs = [(b"k", 1, q, v) for _, q, v in rows]
    slots = list(range(len(rows)))
    expected: list[bytes | None] = list(bufs)
    python_append_rows(expected, slots, at, runs)
    assert expected == [r[:a] + q + r[a:] + v for (r, q, v), a in zip(rows, at, strict=True)]
    append_rows(bufs, slots, at, runs)
    assert bufs == expected
    assert all(type(buf) is bytes for buf in bufs)
