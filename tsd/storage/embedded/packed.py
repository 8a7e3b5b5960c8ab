"""The compressed physical form of compacted cells in the embedded store. Pure.

The storage interface returns OpenTSDB's exact compacted cells; on disk the embedded store
keeps them in a smaller, lossless form (the bytes: ``docs/format/embedded.md``):

* a compacted cell's qualifiers become an offset column and a flags column. Offsets are
  stored as their first value, the smallest step and the steps above it, bit-packed: a
  regular series (every step alike) needs no bit per point, Gorilla's delta-of-delta at its
  limit. Flags take one byte when every point has the same;
* its values become one integer column: integers as they are, floats as decimal mantissas
  with one exponent for the cell when ``mantissa / 10**k`` gives back the exact bytes (what
  VictoriaMetrics does). The column is stored as deltas above their minimum (random walks,
  counters) or as values above their minimum (small gauges), whichever takes fewer bits,
  bit-packed with numpy;
* the payload goes through zstd only when that saves a tenth or more (repetitive data), so
  the common cell decodes with a few numpy calls, and many cells of one shape decode
  together (:func:`unpack_many`).

Encoding: the C helper ``_pack.c`` (built by setup.py where a compiler is) computes the
fast form's fields of many cells in one call (:func:`encode_cells`; the head writes rows out
by the thousand), a few microseconds a cell; cells it does not take (raw values, odd
shapes), and all cells without it, go through the numpy encoder, one at a time (0.2-0.5
ms). Both give the same bytes (tests/storage/test_embedded_packed.py).

A cell that does not fit the fast form (odd flags or lengths, values that are not
decimals, a mix of integer and float points or of second and millisecond qualifiers) is
kept verbatim behind its tag byte, so every byte string round-trips.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import zstandard

import tsd.native as native
from tsd.compression import compressor, decompressor
from tsd.errors import StorageError

#: tag bytes of a packed cell
VERBATIM = 0
FAST = 1

# bits of a fast cell's mode byte
_MS = 0x01  # 4-byte millisecond qualifiers (else 2-byte seconds qualifiers)
_ONE_FLAGS = 0x02  # every point has the flags byte of the header: no flags column
_ZSTD = 0x04  # the payload is one zstd frame
_TAIL = 0x08  # one trailing byte after the values (the compacted cell's meta byte)
_FOR = 0x10  # values above their minimum (else deltas above their minimum)
_CANON = 0x80  # the flags are OpenTSDB's for the values (smallest width): no flags column
_VMODE_SHIFT = 5  # 2 bits: how the values are stored
_V_INT = 0  # every point an integer: the integers
_V_DEC = 1  # every point a float: decimal mantissas, one exponent
_V_RAW = 2  # the value bytes as they are
#: a cell decodes in a group when none of these is set (and its offsets are regular)
_GROUP_MASK = _ZSTD | _V_RAW << _VMODE_SHIFT

#: tag, mode, points, first offset, smallest offset step, flags, decimals, offset bits,
#: value bits, meta byte, base bytes, step bytes, payload bytes
_HEAD = struct.Struct("<BBHIiBBBBBBBI")
HEAD_SIZE = _HEAD.size
#: decimal exponents tried for float cells (10**k is exact as a double up to 22)
MAX_DECIMALS = 15
MAX_POINTS = 0xFFFF
#: cells decoded per numpy pass: their temporaries stay in the CPU cache
GROUP_ROWS = 128
ZSTD_LEVEL = 12
#: integers of this magnitude or more take the raw form: below it every delta, range and
#: base fits 63 bits, so base and low take at most 8 bytes (the C reader takes no more)
_INT_LIMIT = 1 << 61
_POW10 = [float(10**k) for k in range(MAX_DECIMALS + 1)]
_PLANE = np.arange(8, dtype=np.int64)
_BIT_WEIGHTS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def _compress(data: bytes) -> bytes:
    return bytes(compressor(ZSTD_LEVEL, content_size=False).compress(data))


def _decompress(data: bytes) -> bytes:
    return bytes(decompressor().decompress(data, max_output_size=_MAX_RAW))


def decompress(data: bytes) -> bytes:
    """A fast cell's zstd payload, decompressed (zstandard.ZstdError when corrupt)."""
    return _decompress(data)


def decompress_many(frames: Sequence[bytes], sizes: bytes) -> Sequence[object]:
    """Fast cells' zstd payloads decompressed in one call (buffers), ``sizes`` their sizes
    once decompressed (native uint64 each, exact); zstandard.ZstdError when corrupt."""
    context = decompressor()
    if not hasattr(context, "multi_decompress_to_buffer"):  # the cffi backend
        return [context.decompress(f, max_output_size=_MAX_RAW) for f in frames]
    found = context.multi_decompress_to_buffer(list(frames), decompressed_sizes=sizes)
    return [found[i] for i in range(len(found))]


I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
F64 = npt.NDArray[np.float64]
Pair = tuple[bytes, bytes]
#: a fast cell's header fields (mode without the zstd bit), its base, low and payload
Fields = tuple[int, int, int, int, int, int, int, int, int, int, int, bytes]

_C: Any = native.load("tsd.storage.embedded._pack")


# -- entry: the cells of one row and family --------------------------------------------------


def pack(
    cells: Sequence[Pair], encoded: Mapping[Pair, bytes] | None = None, *, grouped: bool = False
) -> bytes:
    """The stored form of ``cells`` (qualifier, value): a count byte, then each cell; or,
    for a family whose rows are packed whole (``grouped``: many small cells, rollups) or
    past 255 cells, the group form (:func:`pack_group`). ``encoded``: cells already
    encoded (:func:`encode_cells` of a whole write)."""
    if grouped or len(cells) > 255:
        return pack_group(cells)
    ordered = sorted(cells)
    if encoded:
        parts = [encoded[cell] for cell in ordered if cell in encoded]
        if len(parts) == len(ordered):
            return bytes([len(cells)]) + b"".join(parts)
    return bytes([len(cells)]) + b"".join(encode_cells(ordered))


# -- group form: every cell of a row and family in columns -------------------------------------
#
# ``00 'G' mode n:u32 head_size:u32 head values``: the count byte 0 followed by more bytes,
# which the cell form never stores (an entry of no cell is one byte, and is deleted anyway).
# The head is the qualifier lengths (u16 each, or one when all are alike: mode bit 1), the
# value lengths (u32 each, u8 when all are below 256: mode bit 3, or one: mode bit 2) and
# the qualifiers end to end, cells sorted by qualifier; the values follow end to end, as they
# are. Nothing is compressed: decompressing a month of rollups' qualifiers with zstd took
# longer than the rest of reading the row and saved about 2 bytes a cell, and full-precision
# doubles (rollup sums) barely compress. Reading a row is a few slices and one copy: rollup
# rows read back as columns straight into a CellBlock (:func:`group_columns`), with no object
# per cell.

GROUP_MARK = b"\x00G"
_GROUP_HEAD = struct.Struct("<BII")
_GROUP_ONE_QLEN = 0x02
_GROUP_ONE_VLEN = 0x04
_GROUP_VLEN_U8 = 0x08


def is_group(data: bytes) -> bool:
    return data[:2] == GROUP_MARK


#: a group of at most this many cells is laid out with struct rather than numpy (a fresh
#: month row of rollups holds 4 cells: numpy's calls cost more than the cells)
SMALL_GROUP = 32


def pack_group(cells: Sequence[Pair]) -> bytes:
    ordered = sorted(cells)
    n = len(ordered)
    if n <= SMALL_GROUP:
        return _small_group_form(ordered)
    return _group_form(
        np.fromiter((len(q) for q, _ in ordered), np.uint16, n),
        np.fromiter((len(v) for _, v in ordered), np.uint32, n),
        b"".join(q for q, _ in ordered),
        b"".join(v for _, v in ordered),
    )


def _group_form(
    qlens: npt.NDArray[Any], vlens: npt.NDArray[Any], quals: bytes, values: bytes
) -> bytes:
    """The group entry of cells already in qualifier order, given as columns."""
    n = len(qlens)
    mode = 0
    if n and (qlens == qlens[0]).all():
        qlens, mode = qlens[:1], mode | _GROUP_ONE_QLEN
    if n and (vlens == vlens[0]).all():
        vlens, mode = vlens[:1], mode | _GROUP_ONE_VLEN
    if len(vlens) and int(vlens.max()) < 256:
        mode |= _GROUP_VLEN_U8
    head = (
        qlens.astype("<u2").tobytes()
        + vlens.astype(np.uint8 if mode & _GROUP_VLEN_U8 else "<u4").tobytes()
        + quals
    )
    return GROUP_MARK + _GROUP_HEAD.pack(mode, n, len(head)) + head + values


def _small_group_form(ordered: Sequence[Pair]) -> bytes:
    """:func:`_group_form` of a few cells in qualifier order, without numpy (the same
    bytes: tests/storage/test_embedded_group_merge.py)."""
    n = len(ordered)
    qlens = [len(q) for q, _ in ordered]
    vlens = [len(v) for _, v in ordered]
    mode = 0
    if n and qlens.count(qlens[0]) == n:
        qlens, mode = qlens[:1], mode | _GROUP_ONE_QLEN
    if n and vlens.count(vlens[0]) == n:
        vlens, mode = vlens[:1], mode | _GROUP_ONE_VLEN
    if vlens and max(vlens) < 256:
        mode |= _GROUP_VLEN_U8
        lengths = bytes(vlens)
    else:
        lengths = struct.pack(f"<{len(vlens)}I", *vlens)
    head = struct.pack(f"<{len(qlens)}H", *qlens) + lengths + b"".join(q for q, _ in ordered)
    values = b"".join(v for _, v in ordered)
    return GROUP_MARK + _GROUP_HEAD.pack(mode, n, len(head)) + head + values


def group_columns(data: bytes) -> tuple[I64, I64, bytes, bytes | memoryview]:
    """A group entry's (qualifier lengths, value lengths, qualifiers, values); StorageError
    when it does not decode."""
    try:
        mode, n, head_size = _GROUP_HEAD.unpack_from(data, 2)
        at = 2 + _GROUP_HEAD.size
        head = data[at : at + head_size]
        values = memoryview(data)[at + head_size :]  # joined by the caller: no copy here
        nq = 1 if mode & _GROUP_ONE_QLEN and n else n
        nv = 1 if mode & _GROUP_ONE_VLEN and n else n
        vwidth = 1 if mode & _GROUP_VLEN_U8 else 4
        qlens = np.frombuffer(head, "<u2", nq, 0).astype(np.int64)
        vlens = np.frombuffer(head, np.uint8 if vwidth == 1 else "<u4", nv, 2 * nq)
        vlens = vlens.astype(np.int64)
    except (ValueError, struct.error, zstandard.ZstdError) as exc:
        raise StorageError(f"corrupt embedded packed value: {exc}") from None
    q_at = 2 * nq + vwidth * nv
    if nq != n:
        qlens = np.full(n, qlens[0], np.int64)
    if nv != n:
        vlens = np.full(n, vlens[0], np.int64)
    if q_at + int(qlens.sum()) != len(head) or int(vlens.sum()) != values.nbytes:
        raise StorageError("corrupt embedded packed value: group lengths")
    return qlens, vlens, head[q_at:], values


def _unpack_group(data: bytes) -> list[Pair]:
    qlens, vlens, quals, view = group_columns(data)
    vals = bytes(view)
    out = []
    q_at = v_at = 0
    for ql, vl in zip(qlens.tolist(), vlens.tolist(), strict=True):
        out.append((quals[q_at : q_at + ql], vals[v_at : v_at + vl]))
        q_at += ql
        v_at += vl
    return out


def unpack(data: bytes) -> list[Pair]:
    """The exact cells of a stored entry, by qualifier; StorageError when they do not decode."""
    if is_group(data):
        return _unpack_group(data)
    try:
        cells = []
        pos = 1
        for _ in range(data[0]):
            qualifier, value, pos = decode_cell(data, pos)
            cells.append((qualifier, value))
    except (IndexError, ValueError, TypeError, struct.error, zstandard.ZstdError) as exc:
        raise StorageError(f"corrupt embedded packed value: {exc}") from None
    if pos != len(data):
        raise StorageError("corrupt embedded packed value: trailing bytes")
    return cells


#: A stored group of at least this many cells takes changes in columns
#: (:func:`_merge_group_columns`); a smaller one cell by cell, which costs less below it.
MERGE_IN_COLUMNS = 64

#: (qualifier, value) set, or (qualifier, None) removed
Change = tuple[bytes, bytes | None]


def merge(
    stored: bytes | None,
    changes: Sequence[Change],
    encoded: Mapping[Pair, bytes] | None = None,
    *,
    grouped: bool = False,
) -> tuple[bool, bytes | None]:
    """A row's stored entry with ``changes`` applied in order: (whether anything changed,
    the new entry, None when no cell is left). :func:`merge_one_by_one` is the rule; a
    big entry of a family packed whole (a month of hourly rollups: thousands of cells, one
    written out with every row-hour) is merged in columns, the same bytes without a
    Python step per stored cell."""
    if grouped and stored is not None and is_group(stored):
        merged = _merge_group_columns(stored, changes)
        if merged is not None:
            return merged
    return merge_one_by_one(stored, changes, encoded, grouped=grouped)


def merge_one_by_one(
    stored: bytes | None,
    changes: Sequence[Change],
    encoded: Mapping[Pair, bytes] | None = None,
    *,
    grouped: bool = False,
) -> tuple[bool, bytes | None]:
    """:func:`merge`'s specification: the cells unpacked, changed one by one, packed."""
    pairs = dict(unpack(stored)) if stored is not None else {}
    changed = False
    for qualifier, value in changes:
        if value is None:
            changed = pairs.pop(qualifier, None) is not None or changed
        else:
            pairs[qualifier] = value
            changed = True
    if not changed:
        return False, None
    return True, pack(list(pairs.items()), encoded, grouped=grouped) if pairs else None


def _qualifier_keys(quals: bytes, count: int, width: int) -> npt.NDArray[np.uint64]:
    """Qualifiers of ``width`` bytes end to end as integers in their byte order."""
    grid = np.zeros((count, 8), dtype=np.uint8)
    grid[:, 8 - width :] = np.frombuffer(quals, np.uint8, count * width).reshape(count, width)
    return grid.view(">u8").ravel().astype(np.uint64)


def _merge_group_columns(
    stored: bytes, changes: Sequence[Change]
) -> tuple[bool, bytes | None] | None:
    """:func:`merge` of a group entry in columns: the stored cells between two changed
    qualifiers are copied as one slice, so the Python steps go with the changes, not the
    cells. None when it does not take the entry (fewer than :data:`MERGE_IN_COLUMNS` cells,
    qualifiers of several lengths or longer than 8 bytes, cells out of order):
    :func:`merge_one_by_one` does."""
    qlens, vlens, quals, view = group_columns(stored)
    n = len(qlens)
    if n < MERGE_IN_COLUMNS:
        return None
    width = int(qlens[0])
    if not 0 < width <= 8 or (qlens != width).any():
        return None
    final: dict[bytes, bytes | None] = {}
    changed = False
    for qualifier, value in changes:
        if len(qualifier) != width:
            return None
        final[qualifier] = value
        changed = changed or value is not None
    keys = _qualifier_keys(quals, n, width)
    if n > 1 and not (keys[1:] > keys[:-1]).all():
        return None
    asked = sorted(final)  # byte order: the keys' order, every qualifier of one width
    at = np.searchsorted(keys, _qualifier_keys(b"".join(asked), len(asked), width))
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(vlens)])
    byte_at = offsets[at].tolist()
    byte_after = offsets[np.minimum(at + 1, n)].tolist()
    q_parts: list[bytes | memoryview] = []
    v_parts: list[bytes | memoryview] = []
    lengths: list[I64] = []
    cursor = cursor_byte = 0
    for qualifier, p, p_byte, after_byte in zip(
        asked, at.tolist(), byte_at, byte_after, strict=True
    ):
        present = p < n and quals[p * width : (p + 1) * width] == qualifier
        if p > cursor:  # the stored cells before this one, as they are
            q_parts.append(quals[cursor * width : p * width])
            v_parts.append(view[cursor_byte:p_byte])
            lengths.append(vlens[cursor:p])
        value = final[qualifier]
        if value is not None:
            q_parts.append(qualifier)
            v_parts.append(value)
            lengths.append(np.array([len(value)], dtype=np.int64))
        if present:
            changed = True
            cursor, cursor_byte = p + 1, after_byte
        else:
            cursor, cursor_byte = p, p_byte
    if not changed:
        return False, None  # only removals, of cells not there
    if cursor < n:
        q_parts.append(quals[cursor * width :])
        v_parts.append(view[cursor_byte:])
        lengths.append(vlens[cursor:])
    out_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    if not len(out_lengths):
        return True, None
    return True, _group_form(
        np.full(len(out_lengths), width, np.uint16),
        out_lengths,
        b"".join(q_parts),
        b"".join(v_parts),
    )


def unpack_many(datas: Sequence[bytes]) -> list[list[Pair]]:
    """:func:`unpack` of many entries. Entries of one fast cell of the same shape (regular
    offsets, bit-packed values, flags not in a column: the common compacted row) decode
    together, one numpy pass per shape instead of one per cell."""
    out: list[list[Pair]] = [[] for _ in datas]
    groups: dict[tuple[int, ...], list[tuple[int, int, int, bytes]]] = {}
    head = _HEAD.unpack_from
    for index, data in enumerate(datas):
        if len(data) <= HEAD_SIZE or data[0] != 1 or data[1] != FAST:
            out[index] = unpack(data)
            continue
        _, mode, n, first, step, flags, k, tbits, vbits, meta, w1, w2, plen = head(data, 1)
        at = 1 + HEAD_SIZE + w1 + w2
        if (
            mode & _GROUP_MASK
            or not mode & (_ONE_FLAGS | _CANON)
            or tbits
            or at + plen != len(data)
        ):
            out[index] = unpack(data)
            continue
        base = int.from_bytes(data[1 + HEAD_SIZE : 1 + HEAD_SIZE + w1], "little", signed=True)
        low = int.from_bytes(data[at - w2 : at], "little", signed=True)
        key = (mode, n, first, step, flags, k, vbits, meta, plen)
        groups.setdefault(key, []).append((index, base, low, data[at:]))
    try:
        for shape, members in groups.items():
            for start in range(0, len(members), GROUP_ROWS):
                _decode_group(shape, members[start : start + GROUP_ROWS], out)
    except (IndexError, ValueError) as exc:
        raise StorageError(f"corrupt embedded packed value: {exc}") from None
    return out


def _decode_group(
    key: tuple[int, ...], members: list[tuple[int, int, int, bytes]], out: list[list[Pair]]
) -> None:
    mode, n, first, step, flag, k, vbits, meta, plen = key
    count = len(members)
    payload = np.frombuffer(b"".join(m[3] for m in members), np.uint8).reshape(count, plen)
    bases = np.array([m[1] for m in members], np.int64)
    lows = np.array([m[2] for m in members], np.int64)
    ints = _ints(payload, mode, n, vbits, bases, lows)
    offsets = np.broadcast_to(first + step * np.arange(n, dtype=np.int64), (count, n))
    cells = _assemble(mode, offsets, None, ints, k, flag, meta)
    for (index, *_), cell in zip(members, cells, strict=True):
        out[index] = [cell]


def _ints(payload: U8, mode: int, n: int, vbits: int, bases: I64, lows: I64) -> I64:
    """The (rows, n) integers of bit-packed value columns at the start of ``payload``."""
    if mode & _FOR:
        return _unpack_bits(payload, n, vbits) + bases[:, None]
    ints = np.empty((len(bases), n), np.int64)
    ints[:, 0] = bases
    ints[:, 1:] = _unpack_bits(payload, n - 1, vbits) + lows[:, None]
    return np.cumsum(ints, axis=1, out=ints)


def _assemble(
    mode: int,
    offsets: I64,
    flags: I64 | None,
    ints: I64 | None,
    k: int,
    flag: int,
    meta: int,
    raw_values: bytes = b"",
) -> list[Pair]:
    """The exact cells of (rows, n) offsets and integers (or one row of raw values)."""
    rows, n = offsets.shape
    vmode = (mode >> _VMODE_SHIFT) & 3
    floats: F64 | None = None
    if vmode == _V_DEC:
        assert ints is not None
        floats = ints.astype(np.float64) / _POW10[k]
    if flags is None:
        if mode & _CANON:
            flags = _canonical_flags(ints, floats)
        else:
            flags = np.full((rows, n), flag, np.int64)
    if mode & _MS:
        qualifiers = (0xF0000000 | (offsets << 6) | flags).astype(">u4").tobytes()
    else:
        qualifiers = ((offsets << 4) | flags).astype(">u2").tobytes()
    qsize = len(qualifiers) // rows if rows else 0
    widths = (flags & 7) + 1
    tail = 1 if mode & _TAIL else 0
    if vmode == _V_RAW:
        values = raw_values + bytes([meta]) * tail
        ends = [len(values)]
    elif bool((widths == widths.flat[0]).all()):
        width = int(widths.flat[0])
        source = floats if floats is not None else ints
        assert source is not None
        dtype = (">f8" if width == 8 else ">f4") if floats is not None else f">i{width}"
        size = n * width + tail
        out = np.empty((rows, size), np.uint8)
        with np.errstate(over="ignore"):
            out[:, : n * width] = source.astype(dtype).view(np.uint8).reshape(rows, n * width)
        if tail:
            out[:, -1] = meta
        values = out.tobytes()
        ends = list(range(size, rows * size + 1, size))
    else:
        values, ends = _scatter(floats, ints, widths, tail, meta)
    cells = []
    start = 0
    for i, end in enumerate(ends):
        cells.append((qualifiers[i * qsize : (i + 1) * qsize], values[start:end]))
        start = end
    return cells


def _scatter(
    floats: F64 | None, ints: I64 | None, widths: I64, tail: int, meta: int
) -> tuple[bytes, list[int]]:
    """The value bytes of (rows, n) points of mixed widths, each row followed by ``tail``
    meta bytes, and the row ends: every point laid out on 8 bytes (4-byte floats in the
    last four), then the unused leading bytes dropped in one boolean pass."""
    rows, n = widths.shape
    size = n * 8 + tail
    buf = np.empty((rows, size), np.uint8)
    if floats is not None:
        buf[:, : n * 8] = floats.astype(">f8").view(np.uint8).reshape(rows, n * 8)
        singles = np.nonzero(widths.reshape(-1) == 4)[0]
        flat = buf.reshape(-1)
        at = (singles // n) * size + (singles % n) * 8
        with np.errstate(over="ignore"):
            four = floats.reshape(-1)[singles].astype(">f4").view(np.uint8).reshape(-1, 4)
        flat[at[:, None] + _PLANE[None, 4:]] = four
        keep = np.ones((rows, size), np.bool_)
        keep.reshape(-1)[at[:, None] + _PLANE[None, :4]] = False
    else:
        assert ints is not None
        buf[:, : n * 8] = ints.astype(">i8").view(np.uint8).reshape(rows, n * 8)
        keep = np.ones((rows, size), np.bool_)
        keep[:, : n * 8] = (_PLANE[None, None, :] >= (8 - widths)[:, :, None]).reshape(rows, -1)
    if tail:
        buf[:, -1] = meta
    ends = np.cumsum(widths.sum(axis=1) + tail)
    return buf[keep].tobytes(), ends.tolist()


def _canonical_flags(ints: I64 | None, floats: F64 | None) -> I64:
    """The flags OpenTSDB's encoder gives these values (the smallest width that holds them)."""
    if floats is not None:
        with np.errstate(over="ignore"):
            single = floats.astype(np.float32).astype(np.float64) == floats
        return np.where(single, 0xB, 0xF).astype(np.int64)
    assert ints is not None
    return np.select(
        [(ints >= -0x80) & (ints <= 0x7F), (ints >= -0x8000) & (ints <= 0x7FFF)],
        [0, 1],
        np.where((ints >= -(1 << 31)) & (ints < 1 << 31), 3, 7),
    ).astype(np.int64)


# -- one cell ----------------------------------------------------------------------------------


def encode_cell(qualifier: bytes, value: bytes) -> bytes:
    """A cell in its fast form when it fits, else verbatim (both start with their tag)."""
    return encode_cells([(qualifier, value)])[0]


def encode_cells(cells: list[Pair]) -> list[bytes]:
    """:func:`encode_cell` of many cells: their fast fields computed in one call of the C
    helper (``_pack.c``, where built), the cells it leaves (and all of them without it)
    with numpy, one at a time; then each cell's zstd and header."""
    found: list[Fields | None] = _C.fast_fields(cells) if _C is not None else [None] * len(cells)
    out = []
    for (qualifier, value), fields in zip(cells, found, strict=True):
        if fields is None and len(qualifier) >= 4:
            fields = _fast_fields(qualifier, value)
        fast = _fast_bytes(fields) if fields is not None else None
        if fast is not None and len(fast) < len(qualifier) + len(value) + 8:
            out.append(fast)
        else:
            out.append(_verbatim(qualifier, value))
    return out


def _verbatim(qualifier: bytes, value: bytes) -> bytes:
    return bytes([VERBATIM]) + struct.pack("<II", len(qualifier), len(value)) + qualifier + value


def decode_cell(data: bytes, pos: int) -> tuple[bytes, bytes, int]:
    """The cell at ``pos`` and the position after it."""
    tag = data[pos]
    if tag == VERBATIM:
        qlen, vlen = struct.unpack_from("<II", data, pos + 1)
        pos += 9
        qualifier = data[pos : pos + qlen]
        value = data[pos + qlen : pos + qlen + vlen]
        if len(qualifier) != qlen or len(value) != vlen:
            raise ValueError("truncated verbatim cell")
        return qualifier, value, pos + qlen + vlen
    if tag != FAST:
        raise ValueError(f"unknown cell tag {tag}")
    return _decode_fast(data, pos)


def _fast_fields(qualifier: bytes, value: bytes) -> Fields | None:
    """The fields of the cell's fast form (its mode without the zstd bit, ..., its
    uncompressed payload: what ``_pack.c`` gives), None when it has none."""
    if len(qualifier) % 2:
        return None
    if qualifier[0] & 0xF0 == 0xF0:  # millisecond qualifiers, 4 bytes each
        if len(qualifier) % 4:
            return None
        raw = np.frombuffer(qualifier, ">u4").astype(np.int64)
        offsets = (raw >> 6) & 0x3FFFFF
        flags = raw & 0xF
        if not np.array_equal(0xF0000000 | (offsets << 6) | flags, raw):
            return None
        mode = _MS
    else:
        raw = np.frombuffer(qualifier, ">u2").astype(np.int64)
        if (raw >= 0xF000).any():  # a mix of second and millisecond qualifiers
            return None
        offsets = raw >> 4
        flags = raw & 0xF
        mode = 0
    n = len(offsets)
    if not 2 <= n <= MAX_POINTS:
        return None
    widths = (flags & 7) + 1
    total = int(widths.sum())
    tail = len(value) - total
    if tail not in (0, 1):
        return None
    steps = np.diff(offsets)
    step = int(steps.min())
    if not -(1 << 31) <= step < 1 << 31:
        return None
    offset_column = steps - step
    tbits = int(offset_column.max()).bit_length()
    columns = [_pack_bits(offset_column, tbits)]
    found = _values(value[:total], flags, widths)
    base = low = k = vbits = 0
    if found is None:
        vmode = _V_RAW
        ints = floats = None
    else:
        vmode, k, ints = found
        floats = ints.astype(np.float64) / _POW10[k] if vmode == _V_DEC else None
    one_flags = bool((flags == flags[0]).all())
    if one_flags:
        mode |= _ONE_FLAGS
    elif vmode != _V_RAW and np.array_equal(_canonical_flags(ints, floats), flags):
        mode |= _CANON
    else:
        columns.append(flags.astype(np.uint8).tobytes())
    if ints is None:
        columns.append(value[:total])
    else:
        deltas = np.diff(ints)
        low = int(deltas.min())
        delta_bits = (int(deltas.max()) - low).bit_length()
        value_min = int(ints.min())
        value_bits = (int(ints.max()) - value_min).bit_length()
        if value_bits * n <= delta_bits * (n - 1) + 16:
            mode |= _FOR
            base, low, vbits = value_min, 0, value_bits
            columns.append(_pack_bits(ints - value_min, vbits))
        else:
            base, vbits = int(ints[0]), delta_bits
            columns.append(_pack_bits(deltas - low, vbits))
    if tail:
        mode |= _TAIL
    mode |= vmode << _VMODE_SHIFT
    return (
        mode,
        n,
        int(offsets[0]),
        step,
        int(flags[0]) if one_flags else 0,
        k,
        tbits,
        vbits,
        value[-1] if tail else 0,
        base,
        low,
        b"".join(columns),
    )


def _fast_bytes(fields: Fields) -> bytes:
    """A fast cell from its fields: the payload zstd-compressed when that saves a tenth."""
    mode, n, first, step, flag, k, tbits, vbits, meta, base, low, payload = fields
    if len(payload) > 64:
        packed = _compress(payload)
        if len(packed) * 10 < len(payload) * 9:
            mode |= _ZSTD
            payload = packed
    w1 = _int_width(base)
    w2 = _int_width(low)
    head = _HEAD.pack(FAST, mode, n, first, step, flag, k, tbits, vbits, meta, w1, w2, len(payload))
    return (
        head
        + base.to_bytes(w1, "little", signed=True)
        + low.to_bytes(w2, "little", signed=True)
        + payload
    )


def _decode_fast(data: bytes, pos: int) -> tuple[bytes, bytes, int]:
    _, mode, n, first, step, flag, k, tbits, vbits, meta, w1, w2, plen = _HEAD.unpack_from(
        data, pos
    )
    pos += HEAD_SIZE
    base = int.from_bytes(data[pos : pos + w1], "little", signed=True)
    low = int.from_bytes(data[pos + w1 : pos + w1 + w2], "little", signed=True)
    pos += w1 + w2
    end = pos + plen
    payload = data[pos:end]
    if len(payload) != plen:
        raise ValueError("truncated fast cell")
    if mode & _ZSTD:
        payload = _decompress(payload)
    view = np.frombuffer(payload, np.uint8)
    at = ((n - 1) * tbits + 7) // 8
    offsets = first + step * np.arange(n, dtype=np.int64)
    if tbits:
        offsets[1:] += np.cumsum(_unpack_bits(view[None, :at], n - 1, tbits)[0])
    flags = np.full((1, n), flag, np.int64) if mode & _ONE_FLAGS else None
    if not mode & (_ONE_FLAGS | _CANON):
        flags = view[None, at : at + n].astype(np.int64)
        at += n
    ints = None
    raw = b""
    if (mode >> _VMODE_SHIFT) & 3 == _V_RAW:
        assert flags is not None
        total = int(((flags & 7) + 1).sum())
        raw = payload[at : at + total]
        at += total
    else:
        m = n if mode & _FOR else n - 1
        vbytes = (m * vbits + 7) // 8
        ints = _ints(
            view[None, at : at + vbytes], mode, n, vbits, np.array([base]), np.array([low])
        )
        at += vbytes
    if at != len(payload):
        raise ValueError("fast cell payload length mismatch")
    ((qualifier, value),) = _assemble(mode, offsets[None, :], flags, ints, k, flag, meta, raw)
    if len(qualifier) != n * (4 if mode & _MS else 2):
        raise ValueError("fast cell qualifier length mismatch")
    return qualifier, value, end


#: the largest uncompressed payload: 64 Ki points of 8-byte offsets, flags and values
_MAX_RAW = MAX_POINTS * 17 + 16


def _values(value: bytes, flags: I64, widths: I64) -> tuple[int, int, I64] | None:
    """(value mode, decimal exponent, the integers) for the value bytes, None: keep raw."""
    if not np.isin(widths, (1, 2, 4, 8)).all():
        return None
    floats = (flags & 8) != 0
    if not floats.any():
        ints = _sign_extended(value, widths, signed=True).view(">i8").reshape(-1)
        ints = ints.astype(np.int64)
        # not np.abs: it wraps -2**63 to itself, which then passed as a small integer
        if ((ints >= _INT_LIMIT) | (ints <= -_INT_LIMIT)).any():
            return None
        return _V_INT, 0, ints
    if not floats.all() or np.isin(widths, (1, 2)).any():
        return None
    bits = _sign_extended(value, widths, signed=False).view(">u8").reshape(-1)
    bits = bits.astype(np.uint64)
    singles = widths == 4
    doubles = bits.view(np.float64).copy()
    if singles.any():
        # a signalling NaN raises numpy's 'invalid value' on widening: not finite, kept raw
        with np.errstate(invalid="ignore"):
            widened = bits[singles].astype(np.uint32).view(np.float32).astype(np.float64)
        doubles[singles] = widened
    if not np.isfinite(doubles).all() or (np.abs(doubles) >= 2.0**52).any():
        return None
    for k in range(MAX_DECIMALS + 1):
        scale = _POW10[k]
        mantissas = np.rint(doubles * scale)
        if (np.abs(mantissas) >= 2.0**52).any():
            return None
        ints = mantissas.astype(np.int64)  # -0.0 becomes 0: the check below sees it
        if _same_bits(ints.astype(np.float64) / scale, bits, singles):
            return _V_DEC, k, ints
    return None


def _sign_extended(value: bytes, widths: I64, *, signed: bool) -> U8:
    """Each point's big-endian bytes right-aligned in 8 bytes (sign-extended when signed)."""
    n = len(widths)
    starts = np.zeros(n, np.int64)
    np.cumsum(widths[:-1], out=starts[1:])
    lead = 8 - widths
    buf = np.frombuffer(value, np.uint8)
    inside = _PLANE[None, :] >= lead[:, None]
    picked = buf[np.where(inside, starts[:, None] + _PLANE[None, :] - lead[:, None], 0)]
    fill = np.zeros((n, 1), np.uint8)
    if signed:
        fill = np.where(buf[starts] >= 0x80, 0xFF, 0).astype(np.uint8)[:, None]
    return np.ascontiguousarray(np.where(inside, picked, fill).astype(np.uint8))


def _same_bits(doubles: F64, bits: npt.NDArray[np.uint64], singles: npt.NDArray[np.bool_]) -> bool:
    """Whether ``doubles``, written as the cell writes its points (4-byte floats where
    ``singles``), have exactly the IEEE bits ``bits`` (each point's, right-aligned): the
    value bytes compared without building them."""
    if not singles.any():
        return bool(np.array_equal(doubles.view(np.uint64), bits))
    with np.errstate(over="ignore"):
        four = doubles[singles].astype(np.float32).view(np.uint32).astype(np.uint64)
    if not np.array_equal(four, bits[singles]):
        return False
    return bool(np.array_equal(doubles[~singles].view(np.uint64), bits[~singles]))


def _pack_bits(column: I64, bits: int) -> bytes:
    """Non-negative integers in ``bits`` bits each, little-endian bit order."""
    if not bits or not len(column):
        return b""
    shifted = column.astype(np.uint64)[:, None] >> np.arange(bits, dtype=np.uint64)[None, :]
    planes = (shifted & np.uint64(1)).astype(np.uint8)
    return bytes(np.packbits(planes, bitorder="little").tobytes())


def _unpack_bits(payload: U8, count: int, bits: int) -> I64:
    """The (rows, count) integers bit-packed at the start of each payload row.

    Every value is read as one unaligned little-endian 64-bit word at its first byte (a
    strided view of the padded rows), shifted and masked: three passes over the values."""
    rows = payload.shape[0]
    if not bits:
        return np.zeros((rows, count), np.int64)
    nbytes = (count * bits + 7) // 8
    if payload.shape[1] < nbytes:
        raise ValueError("truncated bit-packed column")
    if bits > 56:
        flat = np.unpackbits(payload[:, :nbytes], axis=1, count=count * bits, bitorder="little")
        planes = flat.reshape(rows, count, bits).astype(np.uint64)
        return np.asarray((planes * _BIT_WEIGHTS[:bits]).sum(axis=2), np.int64)
    width = nbytes + 8
    padded = np.zeros((rows, width), np.uint8)
    padded[:, :nbytes] = payload[:, :nbytes]
    words = np.ndarray((rows, nbytes), np.dtype("<u8"), padded, 0, (width, 1))
    positions = np.arange(count, dtype=np.int64) * bits
    picked = words[:, positions >> 3] >> (positions & 7).astype(np.uint64)
    return np.ascontiguousarray(picked & np.uint64((1 << bits) - 1)).view(np.int64)


_BYTE_WEIGHTS = (1 << np.arange(8)).astype(np.uint8)


def _int_width(value: int) -> int:
    """Bytes of ``value`` as a signed little-endian integer (0 for zero)."""
    return 0 if value == 0 else (value.bit_length() + 8) // 8
