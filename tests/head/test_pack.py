"""A head row's sealed points packed (tsd/head/pack.py): the codec gives back the cells'
bytes exactly, whatever the points (seconds and milliseconds qualifiers, every value
length, floats, out of order, repeated), and the compiled helpers (tsd/head/_runs.c) answer
byte for byte as the specification."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.head.pack import (
    BLOCK_POINTS,
    full_row,
    full_rows,
    pack,
    pack_rows,
    python_full_rows,
    python_pack,
    python_pack_rows,
    python_unpack,
    unpack,
)

C: Any = native.load("tsd.head._runs")

needs_c = pytest.mark.skipif(C is None, reason="tsd/head/_runs.c is not built")


@st.composite
def cells(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Points as the writer encodes them: any mix of 2-byte seconds and 4-byte milliseconds
    qualifiers, any flags, values of the flags' length; often regular (steady interval,
    constant or counting values) so that runs are exercised too."""
    n = draw(st.integers(0, 80))
    regular = draw(st.booleans())
    step = draw(st.integers(1, 60))
    flags = draw(st.integers(0, 15))
    start = draw(st.integers(0, 3599))
    value = draw(st.integers(0, 2**64 - 1))
    slope = draw(st.integers(-3, 3))
    qs, vs = bytearray(), bytearray()
    for i in range(n):
        if regular and draw(st.integers(0, 20)) != 0:
            offset, f, x = (start + i * step) % 3600, flags, value + slope * i
            wide = False
        else:
            offset, f = draw(st.integers(0, 3599)), draw(st.integers(0, 15))
            x = draw(st.integers(0, 2**64 - 1))
            wide = draw(st.booleans())
        if wide:
            ms = offset * 1000 + draw(st.integers(0, 999))
            qs += (0xF0000000 | ms << 6 | f).to_bytes(4, "big")
        else:
            qs += (offset << 4 | f).to_bytes(2, "big")
        length = (f & 7) + 1
        vs += (x % (1 << (8 * length))).to_bytes(length, "big")
    return bytes(qs), bytes(vs)


PARTS = st.lists(cells(), min_size=1, max_size=5)


@pytest.mark.slow  # a property run of hundreds of examples: the full suite's
@settings(max_examples=300, deadline=None)
@given(parts=PARTS)
def test_packed_parts_give_back_the_points_exactly(parts: list[tuple[bytes, bytes]]) -> None:
    packed, qs, vs = b"", b"", b""
    for q, v in parts:
        done = python_pack(packed, q, v)
        assert done is not None
        packed, qs, vs = done, qs + q, vs + v
        assert python_unpack(packed) == (qs, vs)
    assert unpack(packed) == python_unpack(packed)


@pytest.mark.slow  # a property run of hundreds of examples: the full suite's
@needs_c
@settings(max_examples=300, deadline=None)
@given(parts=PARTS)
def test_the_helper_packs_byte_for_byte_as_the_spec(parts: list[tuple[bytes, bytes]]) -> None:
    py = c = b""
    for q, v in parts:
        py_done, c_done = python_pack(py, q, v), C.pack(c, q, v)
        assert c_done == py_done
        assert py_done is not None
        py = c = py_done
        assert C.unpack(c) == python_unpack(py)


def test_a_regular_series_packs_to_a_few_bytes_a_block() -> None:
    """An hour at 10 s of a constant value: eleven blocks of 32 points, each a run."""
    q = b"".join((i * 10 << 4).to_bytes(2, "big") for i in range(360))
    v = bytes([42]) * 360
    packed = b""
    for at in range(0, 352, BLOCK_POINTS):
        done = pack(packed, q[2 * at : 2 * (at + BLOCK_POINTS)], v[at : at + BLOCK_POINTS])
        assert done is not None
        packed = done
    assert unpack(packed) == (q[:704], v[:352])
    assert len(packed) < 80  # against 1,056 bytes of cells


@settings(max_examples=200, deadline=None)
@given(q=st.binary(max_size=30), v=st.binary(max_size=30))
def test_bytes_that_are_not_whole_points_are_not_packed(q: bytes, v: bytes) -> None:
    want = python_pack(b"", q, v)
    assert pack(b"", q, v) == want
    if want is not None:
        assert python_unpack(want) == (q, v)


@needs_c
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
@example(data=b"\x00\x00\x00\x00lm\x01\x00")  # a qualifier past its two bytes
def test_the_helper_refuses_malformed_packed_bytes_and_never_misreads(data: bytes) -> None:
    found = C.unpack(data)
    if found is not None:
        assert found == python_unpack(data)


@st.composite
def head_rows(draw: st.DrawFn) -> tuple[list[bytes | None], list[int], list[int]]:
    """Rows as the head holds them: a packed part (maybe none) then a raw tail."""
    rows = draw(st.lists(st.tuples(st.lists(cells(), max_size=3), cells()), max_size=8))
    bufs: list[bytes | None] = []
    packed_lens, tail_qs = [], []
    for parts, (tq, tv) in rows:
        packed = b""
        for q, v in parts:
            done = python_pack(packed, q, v)
            assert done is not None
            packed = done
        bufs.append(packed + tq + tv)
        packed_lens.append(len(packed))
        tail_qs.append(len(tq))
    return bufs, packed_lens, tail_qs


@pytest.mark.slow  # a property run of hundreds of examples: the full suite's
@settings(max_examples=200, deadline=None)
@given(rows=head_rows())
def test_rows_packed_and_read_back_as_plain_bytes(
    rows: tuple[list[bytes | None], list[int], list[int]],
) -> None:
    bufs, packed_lens, tail_qs = rows
    q_lens, v_lens = _lengths(bufs, packed_lens, tail_qs)
    arrays = [np.array(x, np.int64) for x in (packed_lens, q_lens, v_lens)]
    plain = python_full_rows([b or b"" for b in bufs], *arrays)
    assert full_rows([b or b"" for b in bufs], *arrays) == plain
    assert [
        full_row(b or b"", *n) for b, *n in zip(bufs, packed_lens, q_lens, v_lens, strict=True)
    ] == plain
    py_bufs, c_bufs = list(bufs), list(bufs)
    slots = list(range(len(bufs)))
    py_lens = python_pack_rows(py_bufs, slots, packed_lens, tail_qs)
    assert pack_rows(c_bufs, slots, packed_lens, tail_qs) == py_lens
    assert c_bufs == py_bufs
    assert all(n == len(b or b"") for n, b in zip(py_lens, py_bufs, strict=True))
    got = full_rows([b or b"" for b in c_bufs], np.array(py_lens, np.int64), *arrays[1:])
    assert got == plain


def _lengths(
    bufs: list[bytes | None], packed_lens: list[int], tail_qs: list[int]
) -> tuple[list[int], list[int]]:
    q_lens, v_lens = [], []
    for buf, p, tq in zip(bufs, packed_lens, tail_qs, strict=True):
        qs, vs = python_unpack((buf or b"")[:p])
        q_lens.append(len(qs) + tq)
        v_lens.append(len(vs) + len(buf or b"") - p - tq)
    return q_lens, v_lens


def _block_mode(packed: bytes) -> int:
    """The mode of a packed part's only block (after its state's four varints)."""
    at = 0
    for _ in range(4):
        while packed[at] & 0x80:
            at += 1
        at += 1
    return packed[at] & 3


@pytest.mark.parametrize("packer", [python_pack, pack], ids=["spec", "compiled"])
def test_a_block_by_differences_only_where_it_saves_a_quarter(packer: Any) -> None:
    """A random walk of doubles (its differences save about a sixth) is kept raw, a read
    then copies it; a counter (a few bytes for 32 points) by its differences; both read
    back exactly."""
    rng = np.random.default_rng(7)
    qualifiers = b"".join(((i * 10) << 4 | 0x0F).to_bytes(2, "big") for i in range(32))
    walk = np.round(50 + np.cumsum(np.round(rng.normal(0, 1, 32), 2)), 2)
    doubles = walk.astype(">f8").tobytes()
    counter_q = b"".join(((i * 10) << 4 | 0x07).to_bytes(2, "big") for i in range(32))
    counter = b"".join((1000 + 5 * i).to_bytes(8, "big") for i in range(32))
    raw = packer(b"", qualifiers, doubles)
    by_differences = packer(b"", counter_q, counter)
    assert _block_mode(raw) == 2
    assert _block_mode(by_differences) in (0, 1)
    assert len(by_differences) * 4 <= len(counter_q + counter) * 3
    assert python_unpack(raw) == unpack(raw) == (qualifiers, doubles)
    assert python_unpack(by_differences) == unpack(by_differences) == (counter_q, counter)
