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
from tsd.head.head import RowBytes
from tsd.head.pack import python_pack
from tsd.protocol.m_syntax import parse_downsample
from tsd.query import compute
from tsd.query import decode as decode_module
from tsd.query.decode import RowPoints, decode_buckets, decode_rows
from tsd.query.downsample import row_buckets
from tsd.query.head_rows import decode_head_parts, decode_head_runs
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


@st.composite
def packed_rows(draw: st.DrawFn) -> tuple[list[tuple[bytes, list[tuple[bytes, bytes]]]], int]:
    """Clean rows as :func:`head_rows`, their points regular or not and their values
    random, constant or counting (so blocks by differences, tsd/head/pack.py, come as
    often as raw ones), and the points per packed block."""
    rows = []
    for r in range(draw(st.integers(1, 5))):
        step = draw(st.sampled_from([1, 10, 60]))
        first = draw(st.integers(0, 99))
        count = draw(st.integers(1, min(120, (3600 - first) // step)))
        offsets = [first + step * i for i in range(count)]
        if draw(st.booleans()):  # irregular: some points dropped
            offsets = sorted(set(draw(st.lists(st.sampled_from(offsets), min_size=1))))
        kind = draw(st.sampled_from(["random", "constant", "counter"]))
        start = draw(VALUES)
        base = BASE + 3600 * (r % 3)
        points = []
        for i, off in enumerate(offsets):
            if kind == "random":
                value = draw(VALUES)
            elif kind == "constant":
                value = start
            else:
                value = int(start) % 2**40 + 7 * i if isinstance(start, int) else 0.5 * i
            _, qualifier, cell = encode_point(base + off, value)
            points.append((qualifier, cell))
        key = encode_row_key(LAYOUT, b"\x00\x00\x01", base, [(b"\x00\x00\x01", bytes([0, 0, r]))])
        rows.append((key, points))
    return rows, draw(st.sampled_from([1, 3, 16, 32]))


def _packed_runs(rows: list[tuple[bytes, list[tuple[bytes, bytes]]]], block: int) -> HeadRuns:
    """The rows as a head snapshot hands them over: each row's own bytes, a packed part of
    its first whole blocks of ``block`` points (python_pack, block after block), then
    its raw tail (qualifiers, then values)."""
    bufs, packed, q_lens, v_lens = [], [], [], []
    for _, points in rows:
        part = b""
        whole = len(points) - len(points) % block
        for at in range(0, whole, block):
            chunk = points[at : at + block]
            done = python_pack(part, b"".join(q for q, _ in chunk), b"".join(v for _, v in chunk))
            assert done is not None
            part = done
        tail = points[whole:]
        bufs.append(part + b"".join(q for q, _ in tail) + b"".join(v for _, v in tail))
        packed.append(len(part))
        q_lens.append(sum(len(q) for q, _ in points))
        v_lens.append(sum(len(v) for _, v in points))
    lengths = (np.array(x, dtype=np.int64) for x in (packed, q_lens, v_lens))
    return HeadRuns(
        [key for key, _ in rows],
        np.array([len(points) for _, points in rows], dtype=np.int64),
        rows=RowBytes(bufs, *lengths),
    )


def _same(got: RowPoints, want: RowPoints) -> None:
    assert _points(got) == _points(want)
    assert got.values.view(np.int64).tolist() == want.values.view(np.int64).tolist()
    assert got.stored_bytes == want.stored_bytes
    if want.row_points is not None:
        assert got.row_points is not None
        assert got.row_points.tolist() == want.row_points.tolist()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=150, deadline=None)
@given(
    packed_rows(),
    st.sampled_from([None, "10s-avg", "1m-avg", "1m-count", "12m-sum", "1h-avg"]),
    st.integers(0, 7200),
)
def test_head_rows_read_from_their_own_bytes_as_from_their_plain_rows(
    drawn: tuple[list[tuple[bytes, list[tuple[bytes, bytes]]]], int],
    spec: str | None,
    seek_s: int,
) -> None:
    # The compiled head_points / head_buckets over the rows' own bytes (packed parts and
    # raw tails) against the specification: the same rows' plain bytes joined, decoded
    # by the numpy path; and cut into parts (decode_head_parts) as a big read is.
    rows, block = drawn
    buckets = None if spec is None else row_buckets(parse_downsample(spec), (BASE + seek_s) * 1000)
    compiled = decode_module._C
    try:
        decode_module._C = None
        want = decode_head_runs(_runs(rows), LAYOUT, buckets)
        for helper in (compiled, None):
            decode_module._C = helper
            _same(decode_head_runs(_packed_runs(rows, block), LAYOUT, buckets), want)
    finally:
        decode_module._C = compiled
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compute, "_CORES", 2)
        patch.setattr(compute, "SPREAD_POINTS", 1)
        parts = decode_head_parts(_packed_runs(rows, block), LAYOUT, buckets)
    assert [k for keys, _ in parts for k in keys] == [key for key, _ in rows]
    got = [_points(p) for _, p in parts]
    offsets = want.row_offsets.tolist()
    at = 0
    for (keys, _), (row_offsets, ts, values, _ints) in zip(parts, got, strict=True):
        first, last = offsets[at], offsets[at + len(keys)]
        assert [o + first for o in row_offsets] == offsets[at : at + len(keys) + 1]
        assert ts == want.timestamps.tolist()[first:last]
        assert values == want.values.tolist()[first:last] or np.isnan(values).any()
        at += len(keys)


def test_c_helper_reads_head_rows_from_their_own_bytes() -> None:
    # Not a test that cannot fail: where a C compiler built it, the helper really answers,
    # and refuses a row whose bytes do not add up to its lengths.
    if decode_module._C is None:
        pytest.skip("tsd.query._decode not loaded (not built, or hidden by TSD_DISABLE_NATIVE)")
    key = encode_row_key(LAYOUT, b"\x00\x00\x01", BASE, [(b"\x00\x00\x01", b"\x00\x00\x01")])
    points = [encode_point(BASE + 10 * i, i + 0.5 if i % 3 else i)[1:] for i in range(360)]
    runs = _packed_runs([(key, points)], 32)
    assert runs.rows is not None
    assert int(runs.rows.packed[0]) > 0
    base = np.array([BASE * 1000], dtype=np.int64)
    rows = runs.rows
    found = decode_module._C.head_points(
        rows.bufs, rows.packed, rows.q_lens, rows.v_lens, runs.counts, base
    )
    assert found is not None
    assert np.frombuffer(found[1]).tolist() == [i + 0.5 if i % 3 else i for i in range(360)]
    many = _packed_runs([(key, points)] * 4, 32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compute, "_CORES", 2)
        patch.setattr(compute, "SPREAD_POINTS", 360)
        assert [len(keys) for keys, _ in decode_head_parts(many, LAYOUT)] == [1, 1, 1, 1]
    short = rows.v_lens - 1
    assert (
        decode_module._C.head_points(rows.bufs, rows.packed, rows.q_lens, short, runs.counts, base)
        is None
    )
