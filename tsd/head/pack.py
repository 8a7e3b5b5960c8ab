"""A head row's sealed points, packed: tsd's own lossless codec of OpenTSDB cells.

Why: the head holds each open row-hour's points as the cells' bytes (2-byte seconds
qualifiers, 1-8 byte values: about 3.4 bytes a point), and a million series at 10 s
hold an hour of them, 360 points a row: about 1,240 bytes a series of points alone
(docs/write-path.md, "A head row's points, packed"). Series mostly send at a regular
interval with values that repeat or change a little, so the points are kept as
differences: the qualifiers' delta-of-delta (0 for a regular interval), the values'
delta or delta-of-delta (0 for a constant or a steady counter), and runs of equal
differences as one entry.

A row's bytes (tsd/head/head.py) are its *packed part* then its *raw tail*: the qualifiers
and then the values of the points since (``append_rows`` appends to the tail). When the
tail holds :data:`BLOCK_POINTS` points, :func:`pack_rows` packs it into a block at the
end of the packed part. Every reader sees the row's plain bytes (:func:`full_rows`): the
packed part decoded, then the tail, exactly the bytes the row had before.

The packed part (every integer an unsigned LEB128 varint, signed ones zigzag-coded):

* the encoder's state after its last point: qualifier Q, its delta dQ, value V and its
  delta dV (V and dV modulo 2**64 read as signed): the next block continues from there;
* blocks, decoded in order from a state of zeros: ``n << 2 | mode`` (n points), then

  - mode 0 / 1 (values by delta-of-delta / by delta): runs until n points, each
    ``count << 2 | wide << 1 | moved``, then zz(ddQ) if ``moved`` (else ddQ is 0), then
    zz(ddV) (mode 0) or zz(dV) (mode 1): ``count`` points of those differences; a point's
    qualifier is Q (4 bytes when ``wide``, else 2), its value the low ``(Q & 7) + 1``
    bytes of V, as the qualifier's flags say;
  - mode 2 (raw: unless a mode by differences takes at most :data:`PACKED_SHARE` of
    its bytes): the qualifiers' and the values' lengths, then those bytes.

:func:`python_pack` and :func:`python_unpack` are the specification and the fallback of
the compiled ``pack`` and ``unpack`` (tsd/head/_runs.c); tests/head/test_pack.py checks
they agree byte for byte and round-trip arbitrary valid cells.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt

import tsd.native as native

__all__ = [
    "BLOCK_POINTS",
    "full_row",
    "full_rows",
    "pack",
    "pack_rows",
    "python_full_rows",
    "python_pack",
    "python_pack_rows",
    "python_unpack",
    "unpack",
]

#: the most points a row's raw tail holds: the head packs it every half of this, at a
#: point count set by the row's slot (tsd/head/head.py ``Head._add_held``), and at this
#: many at the latest. An hour at 10 s is then 22 blocks and a tail of at most 15 points
#: (a block of a regular series costs a few bytes: bench/head_memory.py)
BLOCK_POINTS = 32

#: a block is stored by differences only when that takes at most this share (3/4) of its
#: raw bytes: a reader copies a raw block (tsd/head/_runs.c walks only its qualifiers)
#: where it decodes a varint or two a point of the others, about 19 ns a point for a
#: random walk of doubles (whose differences save about a sixth: not worth that)
PACKED_SHARE = (3, 4)

#: per row, a length (int64: the compiled helper reads the array's buffer)
Lengths = npt.NDArray[np.int64]

_MS_FLAG = 0xF0
_MASK64 = (1 << 64) - 1

_c_pack: Any = native.attribute("tsd.head._runs", "pack")
_c_unpack: Any = native.attribute("tsd.head._runs", "unpack")
_c_pack_rows: Any = native.attribute("tsd.head._runs", "pack_rows")
_c_full_rows: Any = native.attribute("tsd.head._runs", "full_rows")
_c_full_row: Any = native.attribute("tsd.head._runs", "full_row")


def _zz(n: int) -> int:
    return 2 * n if n >= 0 else -2 * n - 1


def _unzz(z: int) -> int:
    return z >> 1 if not z & 1 else -(z >> 1) - 1


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _varint(out: bytearray, x: int) -> None:
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)


def _read(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at``, and where the next one starts."""
    x = shift = 0
    while True:
        b = data[at]
        at += 1
        x |= (b & 0x7F) << shift
        if not b & 0x80:
            return x, at
        shift += 7


def _points(qualifiers: bytes, values: bytes) -> list[tuple[int, int, int]] | None:
    """(wide, Q, V) per point of the cells' bytes; None unless they are whole points
    (2- or 4-byte qualifiers whose flags give each value's length)."""
    points = []
    q_at = v_at = 0
    end, v_end = len(qualifiers), len(values)
    while q_at < end:
        wide = qualifiers[q_at] & _MS_FLAG == _MS_FLAG
        width = 4 if wide else 2
        if q_at + width > end:
            return None
        q = int.from_bytes(qualifiers[q_at : q_at + width], "big")
        v_len = (q & 7) + 1
        if v_at + v_len > v_end:
            return None
        points.append((int(wide), q, int.from_bytes(values[v_at : v_at + v_len], "big")))
        q_at += width
        v_at += v_len
    return points if v_at == v_end else None


def _state(packed: bytes) -> tuple[list[int], int]:
    """The state at the front of a packed part (zeros when empty), and where its blocks
    start."""
    if not packed:
        return [0, 0, 0, 0], 0
    state, at = [], 0
    for _ in range(4):
        z, at = _read(packed, at)
        state.append(_unzz(z))
    return state, at


def python_pack(packed: bytes, qualifiers: bytes, values: bytes) -> bytes | None:
    """The packed part ``packed`` (b"": none yet) with the points ``qualifiers`` and
    ``values`` (the cells' bytes) added as one block; None when they are not whole points."""
    points = _points(qualifiers, values)
    if points is None:
        return None
    state, blocks_at = _state(packed)
    q, dq, v, dv = state[0], state[1], state[2] & _MASK64, state[3] & _MASK64
    tokens: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]] = ([], [])
    for wide, q_new, v_new in points:
        dq_new = q_new - q
        ddq = dq_new - dq
        dv_new = (v_new - v) & _MASK64
        ddv = (dv_new - dv) & _MASK64
        tokens[0].append((wide, ddq, _signed(ddv)))
        tokens[1].append((wide, ddq, _signed(dv_new)))
        q, dq, v, dv = q_new, dq_new, v_new, dv_new
    n = len(points)
    raw = bytearray()
    _varint(raw, n << 2 | 2)
    _varint(raw, len(qualifiers))
    _varint(raw, len(values))
    raw += qualifiers
    raw += values
    best: bytearray | None = None
    for mode in (1, 0):
        block = bytearray()
        _varint(block, n << 2 | mode)
        listed = tokens[mode]
        i = 0
        while i < n:
            token = listed[i]
            j = i + 1
            while j < n and listed[j] == token:
                j += 1
            wide, ddq, x = token
            _varint(block, (j - i) << 2 | wide << 1 | int(ddq != 0))
            if ddq:
                _varint(block, _zz(ddq))
            _varint(block, _zz(x))
            i = j
        if best is None or len(block) <= len(best):
            best = block
    assert best is not None
    if len(best) * PACKED_SHARE[1] > len(raw) * PACKED_SHARE[0]:
        best = raw
    out = bytearray()
    for number in (q, dq, _signed(v), _signed(dv)):
        _varint(out, _zz(number))
    return bytes(out) + packed[blocks_at:] + bytes(best)


def python_unpack(packed: bytes) -> tuple[bytes, bytes]:
    """The qualifiers and the values of the points of a packed part, as they came."""
    _, at = _state(packed)
    qs, vs = bytearray(), bytearray()
    q = dq = v = dv = 0
    end = len(packed)
    while at < end:
        head, at = _read(packed, at)
        n, mode = head >> 2, head & 3
        if mode == 2:
            q_len, at = _read(packed, at)
            v_len, at = _read(packed, at)
            raw_q, raw_v = packed[at : at + q_len], packed[at + q_len : at + q_len + v_len]
            at += q_len + v_len
            points = _points(raw_q, raw_v)
            if points is None or len(points) != n:
                raise ValueError("a raw block of the packed part is not whole points")
            for _, q_new, v_new in points:
                dq, q = q_new - q, q_new
                dv, v = (v_new - v) & _MASK64, v_new
            qs += raw_q
            vs += raw_v
            continue
        left = n
        while left > 0:
            run, at = _read(packed, at)
            count, wide, moved = run >> 2, run >> 1 & 1, run & 1
            ddq = 0
            if moved:
                z, at = _read(packed, at)
                ddq = _unzz(z)
            z, at = _read(packed, at)
            x = _unzz(z) & _MASK64
            for _ in range(count):
                dq += ddq
                q += dq
                if not 0 <= q < 1 << (32 if wide else 16):
                    raise ValueError("a qualifier of the packed part is out of its width")
                dv = (dv + x) & _MASK64 if mode == 0 else x
                v = (v + dv) & _MASK64
                qs += q.to_bytes(4 if wide else 2, "big")
                v_len = (q & 7) + 1
                vs += (v & ((1 << (8 * v_len)) - 1)).to_bytes(v_len, "big")
            left -= count
    return bytes(qs), bytes(vs)


def pack(packed: bytes, qualifiers: bytes, values: bytes) -> bytes | None:
    """:func:`python_pack`, by the compiled helper where it is built."""
    if _c_pack is not None:
        return cast(bytes | None, _c_pack(packed, qualifiers, values))
    return python_pack(packed, qualifiers, values)


def unpack(packed: bytes) -> tuple[bytes, bytes]:
    """:func:`python_unpack`, by the compiled helper where it is built."""
    return cast(tuple[bytes, bytes], _either(_c_unpack, python_unpack, packed))


def pack_rows(
    bufs: list[bytes | None], slots: list[int], packed: list[int], tail_q: list[int]
) -> list[int]:
    """:func:`python_pack_rows`, by the compiled helper where it is built."""
    return cast(list[int], _either(_c_pack_rows, python_pack_rows, bufs, slots, packed, tail_q))


def python_pack_rows(
    bufs: list[bytes | None], slots: list[int], packed: list[int], tail_q: list[int]
) -> list[int]:
    """Per i, the row ``bufs[slots[i]]`` (a packed part of ``packed[i]`` bytes, then a raw
    tail whose qualifiers are ``tail_q[i]`` bytes) replaced by its packed part with the
    tail packed into it; each row's new packed length (its whole length), -1 where the
    tail is not whole points (the row is left as it was)."""
    lengths = []
    for s, p, tq in zip(slots, packed, tail_q, strict=True):
        buf = bufs[s]
        assert buf is not None
        done = python_pack(buf[:p], buf[p : p + tq], buf[p + tq :])
        if done is None:
            lengths.append(-1)
            continue
        bufs[s] = done
        lengths.append(len(done))
    return lengths


def full_rows(bufs: list[bytes], packed: Lengths, q_lens: Lengths, v_lens: Lengths) -> list[bytes]:
    """:func:`python_full_rows`, by the compiled helper where it is built."""
    return cast(list[bytes], _either(_c_full_rows, python_full_rows, bufs, packed, q_lens, v_lens))


def full_row(buf: bytes, packed: int, q_len: int, v_len: int) -> bytes:
    """One row's plain bytes (:func:`python_full_rows` of one row), by the compiled helper
    where it is built (no arrays: a write-out takes a row at a time)."""
    if _c_full_row is not None:
        found = _c_full_row(buf, packed, q_len, v_len)
        if found is not None:
            return cast(bytes, found)
    lengths = (np.array([n], np.int64) for n in (packed, q_len, v_len))
    return python_full_rows([buf], *lengths)[0]


def _either(compiled: Any, spec: Any, *args: Any) -> Any:
    """``compiled(*args)`` where it is built and takes them (not None), else ``spec``'s."""
    if compiled is not None:
        found = compiled(*args)
        if found is not None:
            return found
    return spec(*args)


def python_full_rows(
    bufs: list[bytes], packed: Lengths, q_lens: Lengths, v_lens: Lengths
) -> list[bytes]:
    """Each row's plain bytes (all its qualifiers, then all its values: ``q_lens[i]`` and
    ``v_lens[i]`` bytes) from its packed part of ``packed[i]`` bytes and its raw tail; a row
    with no packed part is itself."""
    rows = []
    lengths = packed.tolist(), q_lens.tolist(), v_lens.tolist()
    for buf, p, q_len, v_len in zip(bufs, *lengths, strict=True):
        if not p:
            rows.append(buf)
            continue
        qs, vs = python_unpack(buf[:p])
        tail_q = int(q_len) - len(qs)
        tail = buf[p:]
        row = qs + tail[:tail_q] + vs + tail[tail_q:]
        if tail_q < 0 or len(row) != q_len + v_len:
            raise ValueError("a head row's packed part does not add up to its lengths")
        rows.append(row)
    return rows
