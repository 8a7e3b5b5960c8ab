"""The head's clean rows decoded straight to arrays (tsd.query.head_rows), by the C helper
and by the numpy path, give the points decode_rows gives for the same rows as compacted
cells (what the rows become once written out)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec import KeyLayout, encode_point, encode_row_key, join_compacted
from tsd.head import HeadRuns
from tsd.protocol.m_syntax import parse_downsample
from tsd.query import decode as decode_module
from tsd.query.decode import RowPoints, decode_buckets, decode_rows
from tsd.query.downsample import row_buckets
from tsd.query.head_rows import decode_head_runs
from tsd.storage.base import Cell, CellBlock, Row

LAYOUT = KeyLayout()
BASE = 1356998400
VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-200, 200),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def head_rows(draw: st.DrawFn) -> list[tuple[bytes, list[tuple[bytes, bytes]]]]:
    """Rows of seconds points in strictly increasing time (clean rows), values of every
    width the writer encodes."""
    rows = []
    for r in range(draw(st.integers(1, 6))):
        offsets = sorted(set(draw(st.lists(st.integers(0, 3599), min_size=1, max_size=40))))
        base = BASE + 3600 * (r % 3)
        points = []
        for off in offsets:
            _, qualifier, value = encode_point(base + off, draw(VALUES))
            points.append((qualifier, value))
        key = encode_row_key(LAYOUT, b"\x00\x00\x01", base, [(b"\x00\x00\x01", bytes([0, 0, r]))])
        rows.append((key, points))
    return rows


def _runs(rows: list[tuple[bytes, list[tuple[bytes, bytes]]]]) -> HeadRuns:
    return HeadRuns(
        [key for key, _ in rows],
        np.array([len(points) for _, points in rows], dtype=np.int64),
        b"".join(q for _, points in rows for q, _ in points),
        b"".join(v for _, points in rows for _, v in points),
    )


def _compacted(rows: list[tuple[bytes, list[tuple[bytes, bytes]]]]) -> RowPoints:
    return decode_rows(_compacted_block(rows), LAYOUT)


def _compacted_block(rows: list[tuple[bytes, list[tuple[bytes, bytes]]]]) -> CellBlock:
    return CellBlock.from_rows(
        [
            Row(
                key,
                (
                    Cell(
                        "t",
                        *join_compacted(
                            b"".join(q for q, _ in points),
                            b"".join(v for _, v in points),
                            len(points),
                            False,
                            True,
                        ),
                    ),
                ),
            )
            for key, points in rows
        ]
    )


def _points(p: RowPoints) -> tuple[list[int], list[int], list[float], list[int] | None]:
    ints = None
    if p.int_values is not None and p.is_int is not None and p.is_int.any():
        ints = np.where(p.is_int, p.int_values, 0).tolist()
    return p.row_offsets.tolist(), p.timestamps.tolist(), p.values.tolist(), ints


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=150, deadline=None)
@given(head_rows())
def test_head_runs_decode_as_their_compacted_cells_with_and_without_c(
    rows: list[tuple[bytes, list[tuple[bytes, bytes]]]],
) -> None:
    expected = _points(_compacted(rows))
    compiled = decode_module._C
    try:
        for helper in (compiled, None):
            decode_module._C = helper
            assert _points(decode_head_runs(_runs(rows), LAYOUT)) == expected
    finally:
        decode_module._C = compiled


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=150, deadline=None)
@given(
    head_rows(),
    st.sampled_from(["1s-sum", "10s-avg", "1m-avg", "1m-count", "12m-zimsum", "1h-avg"]),
    st.integers(0, 7200),
)
def test_head_runs_reduce_to_buckets_as_their_compacted_cells(
    rows: list[tuple[bytes, list[tuple[bytes, bytes]]]], spec: str, seek_s: int
) -> None:
    buckets = row_buckets(parse_downsample(spec), (BASE + seek_s) * 1000)
    assert buckets is not None
    compiled = decode_module._C
    try:
        decode_module._C = None  # the reference: numpy's downsampler over the cells
        want = decode_buckets(_compacted_block(rows), LAYOUT, buckets)
        for helper in (compiled, None):
            decode_module._C = helper
            got = decode_head_runs(_runs(rows), LAYOUT, buckets)
            assert got.row_offsets.tolist() == want.row_offsets.tolist()
            assert got.timestamps.tolist() == want.timestamps.tolist()
            assert got.values.view(np.int64).tolist() == want.values.view(np.int64).tolist()
            assert got.row_points is not None
            assert want.row_points is not None
            assert got.row_points.tolist() == want.row_points.tolist()
    finally:
        decode_module._C = compiled


def test_c_helper_takes_head_runs() -> None:
    # Not a test that cannot fail: where a C compiler built it, the helper really answers.
    if decode_module._C is None:
        pytest.skip("tsd.query._decode not loaded (not built, or hidden by TSD_DISABLE_NATIVE)")
    key = encode_row_key(LAYOUT, b"\x00\x00\x01", BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    points = [encode_point(BASE + 10 * i, i + 0.5 if i % 3 else i)[1:] for i in range(360)]
    runs = _runs([(key, points)])
    found = decode_module._C.decode_runs(
        runs.qualifiers, runs.values, runs.counts, np.array([BASE * 1000], dtype=np.int64)
    )
    assert found is not None
    assert np.frombuffer(found[1]).tolist() == [i + 0.5 if i % 3 else i for i in range(360)]
    # offsets not increasing: not taken (the numpy path decides)
    back = _runs([(key, points[1:2] + points[:1])])
    assert (
        decode_module._C.decode_runs(
            back.qualifiers, back.values, back.counts, np.array([BASE * 1000], dtype=np.int64)
        )
        is None
    )
