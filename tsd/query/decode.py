"""Scanned data rows -> per-series arrays, vectorised with numpy. Pure.

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §4.3-4.4; OpenTSDB 2.4.1
src/core/Internal.java extractDataPoints, CompactionQueue.java, AppendDataPoints.java,
Span.java / SpanCmp in TsdbQuery.java). :func:`tsd.codec.decode_cells` is the scalar
reference of what one row holds; :func:`decode_rows` computes the same thing for many rows
at once and must agree with it point for point (tests/query/test_decode.py checks that on
random rows):

0. A block of data cells in seconds that needs no merge (the usual read: compacted rows,
   or single cells in order) is decoded by the C helper ``_decode.c`` in one walk when it
   is built; anything else, or without it, takes the numpy steps below (same points).
1. All cells of all rows are laid end to end: one buffer of qualifiers, one of values,
   with per-cell offsets. A short Python pass collects them; there is no per-point loop.
2. Each cell is classified from its qualifier length and first byte: a single point in
   seconds (2 bytes), a single point in ms (4 bytes, top nibble 0xF), a compacted cell
   (other even lengths, all its qualifiers of one width), an append cell (``05 00 00``),
   an annotation (``01``...), or something skipped.
3. Every point gets its offset, flags, value length and value position by array arithmetic;
   values are read as 1/2/4/8-byte big-endian integers or 4/8-byte floats at once.
   Append cells are walked entry by entry, all cells in parallel (one numpy step per
   entry index, not per point).
4. A row whose points are strictly increasing is done (the common case: one compacted
   cell, or single cells in qualifier order). Other rows are merged as compaction does:
   ordered by offset, a point from a later cell first, identical duplicates dropped,
   different ones an error unless ``fix_duplicates``.
5. Rows with anything unusual (corrupt lengths, second and ms qualifiers mixed in one
   compacted cell, legacy float fix-ups that fail, ...) are handed to the scalar decoder,
   which either decodes them or raises OpenTSDB's exact IllegalDataError.

:mod:`tsd.query.spans` then groups the decoded rows into series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

import tsd.native as native
from tsd.codec import AnnotationCell, KeyLayout, decode_annotation_qualifier, decode_cells
from tsd.codec.const import APPEND_COLUMN_PREFIX, TIMESTAMP_BYTES
from tsd.query.downsample import RowBuckets, downsample_rows
from tsd.query.series import BoolArray, Float64Array, Int64Array
from tsd.storage.base import Block, CellBlock, PointBlock, Row

_C: Any = native.load("tsd.query._decode")

__all__ = [
    "RowPoints",
    "base_times_s",
    "decode_block",
    "decode_buckets",
    "decode_rows",
    "matrix_base_times_s",
    "reduce_rows",
    "series_key",
]

U8Array = npt.NDArray[np.uint8]
#: int32 or int64 arrays (per-point work uses the narrower type where values fit)
IntArray = npt.NDArray[np.signedinteger[Any]]
U64Array = npt.NDArray[np.uint64]

_MS_MARK = 0xF0
_ANNOTATION_PREFIX = 0x01
_EMPTY_I = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class RowPoints:
    """The decoded points of R rows, row after row (``row_offsets`` has R + 1 entries).

    Within a row points are sorted by time with duplicates resolved. ``int_values`` holds
    the exact value of integer points (0 for doubles), ``is_int`` which points are integers
    (both None when none is); ``values`` every point as a double (an integer converted as
    Java's ``(double) long``).
    """

    row_offsets: Int64Array
    timestamps: Int64Array
    values: Float64Array
    int_values: Int64Array | None  # None (with is_int) when no point is an integer
    is_int: BoolArray | None
    annotations: tuple[tuple[int, AnnotationCell], ...] = ()
    #: bytes read: key, qualifier and value of every cell (the query byte limit counts these)
    stored_bytes: int = 0
    #: rows reduced to their buckets (:func:`decode_buckets`): the points each row held
    #: (the arrays then hold each row's bucket times and values)
    row_points: Int64Array | None = None

    @property
    def point_count(self) -> int:
        """Points (or buckets) in the arrays."""
        return len(self.timestamps)

    @property
    def decoded_points(self) -> int:
        """Data points the rows held (the query's data point limit counts these)."""
        return self.point_count if self.row_points is None else int(self.row_points.sum())


def series_key(layout: KeyLayout, row_key: bytes) -> bytes:
    """The row key without its base time: what all rows of one series share."""
    start = layout.tags_start
    return row_key[: start - TIMESTAMP_BYTES] + row_key[start:]


# --------------------------------------------------------------------------- rows


@dataclass(slots=True)
class _Cells:
    """All cells of a batch of rows, end to end."""

    row: Int64Array  # row of each cell
    qlen: Int64Array
    vlen: Int64Array
    voff: Int64Array
    ufirst: Int64Array  # index of the cell's first 2-byte qualifier unit
    units: IntArray  # every qualifier as 2-byte big-endian units (odd ones padded), + 1 pad
    v: U8Array  # value bytes, padded with 8 zero bytes
    first: Int64Array  # first qualifier byte (0 for empty qualifiers)


@dataclass(slots=True)
class _Entries:
    """One entry per point found in the fast path, in (cell, stored position) order."""

    cell: IntArray
    offset_ms: IntArray
    flags: IntArray
    vstart: Int64Array  # index of the first value byte in the value buffer
    vlen: IntArray  # bytes of the value


def _collect(rows: Sequence[Row]) -> _Cells:
    if isinstance(rows, CellBlock) and not (rows.qualifier_lengths & 1).any():
        return _collect_block(rows)
    counts = np.fromiter((len(r.cells) for r in rows), np.int64, len(rows))
    quals = [c.qualifier for r in rows for c in r.cells]
    vals = [c.value for r in rows for c in r.cells]
    n = len(quals)
    qlen = np.fromiter(map(len, quals), np.int64, n)
    vlen = np.fromiter(map(len, vals), np.int64, n)
    if (qlen & 1).any():
        # Pad odd qualifiers (appends, annotations) so every qualifier starts on a unit.
        quals = [q + b"\0" if len(q) & 1 else q for q in quals]
    nunits = (qlen + 1) // 2
    ufirst = np.zeros(n, dtype=np.int64)
    voff = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(nunits[:-1], out=ufirst[1:])
        np.cumsum(vlen[:-1], out=voff[1:])
    quals.append(bytes(2))  # padding, joined in rather than appended (one copy)
    vals.append(bytes(8))
    units = np.frombuffer(b"".join(quals), dtype=">u2").astype(np.int32)
    v = np.frombuffer(b"".join(vals), dtype=np.uint8)
    first = np.where(qlen > 0, units[np.minimum(ufirst, len(units) - 1)] >> 8, 0).astype(np.int64)
    row = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
    return _Cells(row, qlen, vlen, voff, ufirst, units, v, first)


def _collect_block(block: CellBlock) -> _Cells:
    """_collect for cells already end to end, all qualifiers of even length (no copy per
    cell: the joined qualifiers and values are read as they are)."""
    n = block.cell_count
    qlen, vlen = block.qualifier_lengths, block.value_lengths
    ufirst = np.zeros(n, dtype=np.int64)
    voff = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(qlen[:-1] // 2, out=ufirst[1:])
        np.cumsum(vlen[:-1], out=voff[1:])
    units = np.frombuffer(block.qualifiers + bytes(2), dtype=">u2").astype(np.int32)
    v = np.frombuffer(block.values + bytes(8), dtype=np.uint8)
    first = np.where(qlen > 0, units[np.minimum(ufirst, len(units) - 1)] >> 8, 0).astype(np.int64)
    row = np.repeat(np.arange(len(block), dtype=np.int64), block.counts)
    return _Cells(row, qlen, vlen, voff, ufirst, units, v, first)


def _read_be(buf: U8Array, start: Int64Array, width: int) -> Int64Array:
    """Big-endian unsigned integers of ``width`` (2 or 4) bytes at ``start``."""
    out = buf[start].astype(np.int64)
    for k in range(1, width):
        out = (out << 8) | buf[start + k]
    return out


#: Readable (flags) combinations: floats on 4 or 8 bytes, integers on 1, 2, 4 or 8, with the
#: length taken from the flags (compacted, ms and append entries).
_VALID_FLAGS = np.array(
    [f & 0x8 == 0 and f & 0x7 in (0, 1, 3, 7) or f in (0xB, 0xF) for f in range(16)]
)


#: _VALID_FLAGS as a bit mask over the 16 flag values.
_VALID_MASK = sum(1 << f for f in range(16) if _VALID_FLAGS[f])


def _present_kinds(flags: IntArray) -> int:
    """The set of flag values (0..15) present, as a bit mask (one OR-reduction, no counts)."""
    if not len(flags):
        return 0
    return int(np.bitwise_or.reduce(np.left_shift(1, flags & 0xF)))


def _valid_lengths(flags: Int64Array, vlen: Int64Array) -> BoolArray:
    """Value lengths OpenTSDB can read: floats on 4 or 8 bytes, integers on 1, 2, 4, 8."""
    is_float = (flags & 0x8) != 0
    return np.where(is_float, (vlen == 4) | (vlen == 8), np.isin(vlen, (1, 2, 4, 8)))


def _reduce_or(mask: BoolArray, starts: Int64Array, ncells: int, nonempty: BoolArray) -> BoolArray:
    """Per cell: is ``mask`` set on any of its units."""
    out = np.zeros(ncells, dtype=np.bool_)
    if len(mask) and nonempty.any():
        out[nonempty] = np.logical_or.reduceat(mask, starts[nonempty])
    return out


def _even_cells(c: _Cells, bad: BoolArray) -> _Entries:
    """Cells with an even qualifier length: single points in seconds or ms, and compacted
    cells whose qualifiers are all 2-byte or all 4-byte. Works on 2-byte qualifier units."""
    ncells = len(c.qlen)
    qlen = c.qlen
    nunits = (qlen + 1) // 2
    units = c.units[:-1]
    if ncells and (qlen % 2 == 0).all() and qlen.min() > 0 and units.max() < 0xF000:
        # The common read: every qualifier is made of 2-byte (seconds) qualifiers.
        return _seconds_cells(c, bad, units, nunits)
    nonempty = nunits > 0
    even = ((qlen & 1) == 0) & nonempty
    single_s = qlen == 2
    single_ms = (qlen == 4) & (c.first >= _MS_MARK)
    compacted = even & (qlen >= 4) & ~single_ms
    unit_ms = units >= 0xF000
    any_ms = _reduce_or(unit_ms, c.ufirst, ncells, nonempty)
    two = single_s | (compacted & ~any_ms)
    four = single_ms
    ucell: Int64Array | None = None
    evenpos: BoolArray | None = None
    candidates = compacted & any_ms & (qlen % 4 == 0)
    if candidates.any() or single_ms.any():
        ucell = np.repeat(np.arange(ncells, dtype=np.int64), nunits)
        evenpos = ((np.arange(len(units), dtype=np.int64) - c.ufirst[ucell]) & 1) == 0
        not_head_ms = evenpos & ~unit_ms
        four = four | (candidates & ~_reduce_or(not_head_ms, c.ufirst, ncells, nonempty))
    bad[c.row[compacted & ~two & ~four]] = True
    if two.all():
        heads = np.arange(len(units), dtype=np.int64)
        cell = np.repeat(np.arange(ncells, dtype=np.int64), nunits)
    else:
        if ucell is None or evenpos is None:
            ucell = np.repeat(np.arange(ncells, dtype=np.int64), nunits)
            evenpos = ((np.arange(len(units), dtype=np.int64) - c.ufirst[ucell]) & 1) == 0
        heads = np.flatnonzero(two[ucell] | (four[ucell] & evenpos))
        cell = ucell[heads]
    hi = c.units[heads].astype(np.int64)
    if four.any():
        is4 = four[cell]
        lo = c.units[heads + 1].astype(np.int64)
        flags = np.where(is4, lo & 0xF, hi & 0xF)
        offset = np.where(is4, (((hi << 16) | lo) & 0x0FFFFFC0) >> 6, (hi >> 4) * 1000)
    else:
        flags = hi & 0xF
        offset = (hi >> 4) * 1000
    vl = (flags & 0x7) + 1
    n = len(cell)
    if n == 0:
        return _empty_entries()
    # Entries per cell (cells without entries are skipped by ``owners``).
    if two.all():
        owners = np.flatnonzero(nunits > 0)
        firsts = c.ufirst[owners]
    else:
        change = np.ones(n, dtype=np.bool_)
        change[1:] = cell[1:] != cell[:-1]
        firsts = np.flatnonzero(change)
        owners = cell[firsts]
    per_cell = np.diff(np.append(firsts, n))
    # Value positions: running sum of lengths, restarted at each cell's value offset.
    excl = np.cumsum(vl)
    used = excl[firsts + per_cell - 1] - (excl[firsts] - vl[firsts])
    excl -= vl
    vstart = excl + np.repeat(c.voff[owners] - excl[firsts], per_cell)
    # Compacted cells: every value byte but the trailing meta byte must be used.
    comp_owner = compacted[owners]
    bad[c.row[owners[comp_owner & (used != c.vlen[owners] - 1)]]] = True
    # Single ms points: the value must hold the flags' length (extra bytes are ignored).
    ms_owner = single_ms[owners]
    bad[c.row[owners[ms_owner & (c.vlen[owners] < vl[firsts])]]] = True
    s_owner = single_s[owners]
    if s_owner.any():
        _fix_single_seconds(c, firsts[s_owner], owners[s_owner], flags, vstart, vl, bad)
    # Flags that cannot be read (single second cells are fixed up above).
    if _present_kinds(flags) & ~_VALID_MASK:
        invalid = ~_VALID_FLAGS[flags]
        bad[c.row[cell[invalid]]] = True
    return _Entries(cell, offset, flags, vstart, vl)


def _seconds_cells(
    c: _Cells, bad: BoolArray, units: npt.NDArray[np.int32], nunits: Int64Array
) -> _Entries:
    """_even_cells when every qualifier unit is a seconds qualifier: one point per unit."""
    ncells = len(c.qlen)
    flags = units & 0xF
    offset = (units >> 4) * 1000
    vl = (flags & 0x7) + 1
    cell = np.repeat(np.arange(ncells, dtype=np.int32), nunits)
    firsts = c.ufirst
    csum = np.cumsum(vl, dtype=np.int64)
    used = csum[firsts + nunits - 1] - csum[firsts] + vl[firsts]
    csum -= vl
    vstart = csum + np.repeat(c.voff - csum[firsts], nunits)
    compacted = c.qlen > 2
    bad[c.row[compacted & (used != c.vlen - 1)]] = True
    single = np.flatnonzero(~compacted)
    if len(single):
        _fix_single_seconds(c, firsts[single], single, flags, vstart, vl, bad)
    if _present_kinds(flags) & ~_VALID_MASK:
        bad[c.row[cell[~_VALID_FLAGS[flags]]]] = True
    return _Entries(cell, offset, flags, vstart, vl)


def _fix_single_seconds(
    c: _Cells,
    at: Int64Array,
    cells: Int64Array,
    flags: Int64Array,
    vstart: Int64Array,
    vl: Int64Array,
    bad: BoolArray,
) -> None:
    """2-byte cells take their value length from the value (ColumnDatapointIterator's
    fix-ups), after Internal.fixFloatingPointValue's legacy 4-byte float on 8 bytes."""
    f = flags[at]
    length = c.vlen[cells].copy()
    start = vstart[at]
    legacy = ((f & 0xF) == 0xB) & (length == 8)
    if legacy.any():
        p = start[legacy]
        zeros = (c.v[p] | c.v[p + 1] | c.v[p + 2] | c.v[p + 3]) == 0
        bad[c.row[cells[legacy][~zeros]]] = True
        start[legacy] += 4
        length[legacy] = 4
    fixed = (f & 0x8) | ((length - 1) & 0x7)
    ok = (length >= 1) & (length <= 8) & _valid_lengths(fixed, length)
    bad[c.row[cells[~ok]]] = True
    # Unreadable cells keep a readable kind here; their rows are decoded by the reference.
    fixed[~ok] = 0
    flags[at] = fixed
    vstart[at] = start
    vl[at] = length


def _append_cells(c: _Cells, idx: Int64Array, bad: BoolArray) -> _Entries:
    """Append cells: walk the ``qualifier||value`` entries of all cells in parallel, then
    keep the later of two entries at one offset and sort by offset (AppendDataPoints)."""
    if not len(idx):
        return _empty_entries()
    pieces: list[tuple[Int64Array, ...]] = []
    at = c.voff[idx].copy()
    end = at + c.vlen[idx]
    live = np.flatnonzero(at < end)
    step = 0
    while len(live):
        p = at[live]
        ms = c.v[p] >= _MS_MARK
        qw = np.where(ms, 4, 2)
        over = p + qw > end[live]
        raw2 = _read_be(c.v, p, 2)
        raw4 = _read_be(c.v, p, 4)
        flags = np.where(ms, raw4 & 0xF, raw2 & 0xF)
        offset = np.where(ms, (raw4 & 0x0FFFFFC0) >> 6, (raw2 >> 4) * 1000)
        vl = (flags & 0x7) + 1
        over |= p + qw + vl > end[live]
        if over.any():
            bad[c.row[idx[live[over]]]] = True
        ok = ~over
        good = live[ok]
        pieces.append((good, np.full(len(good), step), offset[ok], flags[ok], (p + qw)[ok], vl[ok]))
        at[good] = (p + qw + vl)[ok]
        live = good[at[good] < end[good]]
        step += 1
    if not pieces:
        return _empty_entries()
    owner, step_no, offset, flags, vstart, vl = (
        np.concatenate(x) for x in zip(*pieces, strict=True)
    )
    # Sort by (cell, offset, later entry first); keep the first of each (cell, offset).
    order = np.lexsort((-step_no, offset, owner))
    owner, offset, flags, vstart, vl = (x[order] for x in (owner, offset, flags, vstart, vl))
    keep = np.ones(len(owner), dtype=np.bool_)
    keep[1:] = (owner[1:] != owner[:-1]) | (offset[1:] != offset[:-1])
    owner, offset, flags, vstart, vl = (x[keep] for x in (owner, offset, flags, vstart, vl))
    bad[c.row[idx[owner[~_valid_lengths(flags, vl)]]]] = True
    return _Entries(idx[owner], offset, flags, vstart, vl)


def _empty_entries() -> _Entries:
    return _Entries(*(_EMPTY_I for _ in range(5)))


def _concat_entries(parts: Sequence[_Entries]) -> _Entries:
    parts = [p for p in parts if len(p.cell)]
    if not parts:
        return _empty_entries()
    if len(parts) == 1:
        return parts[0]
    cat = [np.concatenate([getattr(p, name) for p in parts]) for name in _Entries.__slots__]
    order = np.argsort(cat[0], kind="stable")
    return _Entries(*(x[order] for x in cat))


#: Canonical flags (float bit | length - 1) -> the big-endian numpy type of the value.
_VALUE_TYPES = {0x0: ">i1", 0x1: ">i2", 0x3: ">i4", 0x7: ">i8", 0xB: ">f4", 0xF: ">f8"}


def _values(
    v: U8Array, vstart: Int64Array, flags: IntArray
) -> tuple[Float64Array, Int64Array | None, BoolArray | None]:
    """(doubles, exact integers, is integer) of every point, read one value type at a time
    through a typed view of the value buffer (no per-point work in Python). The integer
    arrays are None when no point is an integer."""
    n = len(vstart)
    kind = flags & 0xF
    mask = _present_kinds(kind)
    present = [k for k in _VALUE_TYPES if mask >> k & 1]
    if len(present) == 1:
        doubles, ints = _read_type(v, vstart, present[0])
        return doubles, ints, None if ints is None else np.ones(n, dtype=np.bool_)
    if any(k < 0x8 for k in present):
        return _mixed_values(v, vstart, kind)
    # 4- and 8-byte floats: one gather of the 8 bytes at each value's start (the buffer is
    # padded), read as doubles, then the 4-byte ones replaced by their word's top half.
    word = _typed_view(v, ">u8")[vstart].astype(np.uint64)
    doubles = word.view(np.float64)
    f4 = np.flatnonzero(kind == 0xB)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one
        doubles[f4] = (word[f4] >> np.uint64(32)).astype(np.uint32).view(np.float32)
    return doubles, None, None


def _mixed_values(
    v: U8Array, vstart: Int64Array, kind: IntArray
) -> tuple[Float64Array, Int64Array, BoolArray]:
    """_values for integers mixed with other types, in one pass: the 8 bytes at each value's
    start read as one big-endian word hold the value in their top bytes, so an arithmetic
    shift gives every integer sign-extended, and the words of floats are reinterpreted."""
    word = _typed_view(v, ">i8")[vstart].astype(np.int64)
    is_int = (kind & 0x8) == 0
    shift = (64 - 8 * ((kind & 0x7) + 1)).astype(np.int64)
    ints = np.where(is_int, word >> shift, 0)
    doubles = ints.astype(np.float64)
    f8 = np.flatnonzero(kind == 0xF)
    if len(f8):
        doubles[f8] = word[f8].view(np.float64)
    f4 = np.flatnonzero(kind == 0xB)
    if len(f4):
        with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one
            doubles[f4] = (word[f4] >> 32).astype(np.uint32).view(np.float32)
    return doubles, ints, is_int


def _read_type(v: U8Array, vstart: Int64Array, kind: int) -> tuple[Float64Array, Int64Array | None]:
    raw = _typed_view(v, _VALUE_TYPES[kind])[vstart]
    if kind & 0x8:
        with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one
            return raw.astype(np.float64), None
    ints = raw.astype(np.int64)
    return ints.astype(np.float64), ints


def _typed_view(v: U8Array, type_code: str) -> npt.NDArray[Any]:
    """The buffer seen as a value of ``type_code`` starting at *every* byte (stride 1,
    unaligned): element ``i`` is the value whose first byte is ``v[i]``."""
    dtype = np.dtype(type_code)
    count = max(len(v) - dtype.itemsize + 1, 0)
    return np.ndarray(shape=(count,), dtype=dtype, buffer=v, strides=(1,))


def _value_bytes(v: U8Array, vstart: Int64Array, vl: IntArray) -> U64Array:
    """The value bytes of each point as one integer (with the length, its identity)."""
    raw = _typed_view(v, ">u8")[vstart].astype(np.uint64)
    return raw >> ((8 - vl) * 8).astype(np.uint64)


def decode_rows(
    rows: Sequence[Row], layout: KeyLayout, *, fix_duplicates: bool = False
) -> RowPoints:
    """Decode every data row of ``rows`` (see the module docstring).

    Raises IllegalDataError, with the scalar decoder's message, for a row OpenTSDB could not
    read (corrupt cells, conflicting duplicates without ``fix_duplicates``).
    """
    n_rows = len(rows)
    if isinstance(rows, CellBlock):
        compiled = _compiled(rows, layout)
        if compiled is not None:
            return compiled
    c = _collect(rows)
    bad = np.zeros(n_rows, dtype=np.bool_)
    odd = (c.qlen & 1) == 1
    bad[c.row[c.qlen == 0]] = True
    is_append = odd & (c.first == APPEND_COLUMN_PREFIX)
    bad[c.row[is_append & (c.qlen != 3)]] = True
    appends = np.flatnonzero(is_append & (c.qlen == 3))
    notes = np.flatnonzero(odd & (c.first == _ANNOTATION_PREFIX) & np.isin(c.qlen, (3, 5)))
    entries = _even_cells(c, bad)
    if len(appends):
        entries = _concat_entries((entries, _append_cells(c, appends, bad)))
    keys = rows.keys if isinstance(rows, CellBlock) else [r.key for r in rows]
    base_ms = base_times_s(layout, keys) * 1000
    annotations = _annotations(rows, c, notes, base_ms)

    e_row = c.row[entries.cell]
    if bad.any():
        keep = ~bad[e_row]
        entries = _Entries(*(getattr(entries, n)[keep] for n in _Entries.__slots__))
        e_row = e_row[keep]
    doubles, ints, is_int = _values(c.v, entries.vstart, entries.flags)
    points = _Points(e_row, entries.offset_ms, doubles, ints, is_int)
    # Rows whose points are not strictly increasing need compaction's merge (cheap test
    # first: offsets fall at every row boundary anyway).
    offset = entries.offset_ms
    falls = np.flatnonzero(offset[1:] <= offset[:-1])
    falls = falls[e_row[falls] == e_row[falls + 1]]
    pieces = [points]
    if len(falls):
        needs_merge = np.zeros(n_rows, dtype=np.bool_)
        needs_merge[e_row[falls]] = True
        in_merge = needs_merge[e_row]
        merging = np.flatnonzero(in_merge)
        pieces = [
            points.take(np.flatnonzero(~in_merge)),
            _merge(
                rows,
                layout,
                points.take(merging),
                entries.cell[merging],
                _value_bytes(c.v, entries.vstart[merging], entries.vlen[merging]),
                entries.vlen[merging],
                fix_duplicates,
            ),
        ]
    for r in np.flatnonzero(bad).tolist():
        pieces.append(_scalar_row(rows[r], r, layout, fix_duplicates))
    merged = _Points.concat(pieces)
    # Points are in row order: the row boundaries by binary search.
    row_offsets = np.searchsorted(merged.row, np.arange(n_rows + 1, dtype=np.int64))
    timestamps = np.repeat(base_ms, np.diff(row_offsets)) + merged.offset
    if isinstance(rows, CellBlock):
        stored = rows.stored_bytes
    else:
        key_bytes = sum(len(r.key) * len(r.cells) for r in rows)
        stored = key_bytes + int(c.qlen.sum()) + int(c.vlen.sum())
    return RowPoints(
        row_offsets.astype(np.int64),
        timestamps,
        merged.doubles,
        merged.ints,
        merged.is_int,
        annotations,
        stored,
    )


def decode_block(block: Block, layout: KeyLayout, *, fix_duplicates: bool = False) -> RowPoints:
    """:func:`decode_rows` of a bulk read's block. A PointBlock holds its rows' points
    already (the store decoded them, tsd.storage.base): they only get their base times."""
    if not isinstance(block, PointBlock):
        return decode_rows(block, layout, fix_duplicates=fix_duplicates)
    base_ms = base_times_s(layout, block.keys) * 1000
    row_offsets = np.zeros(len(block) + 1, dtype=np.int64)
    np.cumsum(block.counts, out=row_offsets[1:])
    timestamps = np.repeat(base_ms, block.counts)
    timestamps += block.offsets_ms  # in place: one array of every point, not two
    return RowPoints(
        row_offsets,
        timestamps,
        block.values,
        block.ints,
        block.is_int,
        (),
        block.stored_bytes,
    )


def decode_buckets(
    block: Block, layout: KeyLayout, buckets: RowBuckets, *, fix_duplicates: bool = False
) -> RowPoints:
    """The block's rows, each reduced to its buckets (tsd.query.downsample's
    :class:`RowBuckets`): ``row_points`` holds how many points each row had. By the C
    helper (without the GIL: the event loop reads on meanwhile) when it takes the block,
    else decoded and reduced by numpy, with the same answer. Raises RowsOutOfHour for
    rows that cannot be reduced one by one."""
    if _C is not None and len(block):
        base_ms = base_times_s(layout, block.keys) * 1000
        if isinstance(block, CellBlock):
            found = _C.decode_buckets(*cell_buffers(block, base_ms), *bucket_args(buckets))
        else:
            found = _C.point_buckets(
                np.ascontiguousarray(block.offsets_ms, dtype=np.int64),
                np.ascontiguousarray(block.values, dtype=np.float64),
                np.ascontiguousarray(block.counts, dtype=np.int64),
                base_ms,
                *bucket_args(buckets),
            )
        if found is not None:
            return compiled_buckets(found, block.stored_bytes)
    points = decode_block(block, layout, fix_duplicates=fix_duplicates)
    return reduce_rows(points, block.keys, layout, buckets)


def bucket_args(buckets: RowBuckets) -> tuple[int, int, int]:
    """What _decode.c's bucket reductions take after the rows: interval, seek, function."""
    return buckets.spec.interval_ms, buckets.seek_ms, buckets.function_code


def compiled_buckets(found: tuple[Any, ...], stored_bytes: int) -> RowPoints:
    """RowPoints of a C bucket reduction's answer (``_decode.c``: bucket times, values,
    row offsets into the buckets and points per row, as bytearrays)."""
    ts, values, row_offsets, row_points = found
    return RowPoints(
        np.frombuffer(row_offsets, dtype=np.int64),
        np.frombuffer(ts, dtype=np.int64),
        np.frombuffer(values, dtype=np.float64),
        None,
        None,
        (),
        stored_bytes,
        np.frombuffer(row_points, dtype=np.int64),
    )


def reduce_rows(
    points: RowPoints, keys: Sequence[bytes], layout: KeyLayout, buckets: RowBuckets
) -> RowPoints:
    """Decoded rows (``keys``, their ``points``) each reduced to its buckets by numpy's
    downsampler, ``row_points`` set, as :func:`decode_buckets` gives them. Raises
    RowsOutOfHour for rows that cannot be reduced one by one."""
    base_ms = base_times_s(layout, list(keys)) * 1000
    reduced = downsample_rows(
        points.timestamps, points.values, points.row_offsets, base_ms, buckets
    )
    return RowPoints(
        reduced.offsets,
        reduced.timestamps,
        reduced.values,
        None,
        None,
        points.annotations,
        points.stored_bytes,
        np.diff(points.row_offsets),
    )


def cell_buffers(block: CellBlock, base_ms: Int64Array) -> tuple[Any, ...]:
    """The block's cells as _decode.c's helpers take them: qualifiers, values, then int64
    buffers of qualifier lengths, value lengths, cells per row and base times in ms."""
    return (
        block.qualifiers,
        block.values,
        *(
            np.ascontiguousarray(a, dtype=np.int64)
            for a in (block.qualifier_lengths, block.value_lengths, block.counts, base_ms)
        ),
    )


def _compiled(block: CellBlock, layout: KeyLayout) -> RowPoints | None:
    """decode_rows by the C helper (_decode.c) when it is built and takes the block: data
    cells in seconds needing no merge (the usual read); None otherwise."""
    if _C is None or not len(block):
        return None
    found = _C.decode_seconds(*cell_buffers(block, base_times_s(layout, block.keys) * 1000))
    return None if found is None else compiled_points(found, block.stored_bytes)


def compiled_points(found: tuple[Any, ...], stored_bytes: int) -> RowPoints:
    """RowPoints of a C helper's answer (``_decode.c``: timestamps, doubles, ints, is_int,
    row offsets as bytearrays, and whether any point is an integer)."""
    ts, doubles, ints, is_int, row_offsets, any_int = found
    return RowPoints(
        np.frombuffer(row_offsets, dtype=np.int64),
        np.frombuffer(ts, dtype=np.int64),
        np.frombuffer(doubles, dtype=np.float64),
        np.frombuffer(ints, dtype=np.int64) if any_int else None,
        np.frombuffer(is_int, dtype=np.bool_) if any_int else None,
        (),
        stored_bytes,
    )


def key_times(layout: KeyLayout, keys: list[bytes]) -> tuple[Int64Array, Int64Array]:
    """Each row key's length and base time (s), by the compiled helper's one pass over the
    keys (``key_times`` in _decode.c) where it is built, else :func:`key_times_python`."""
    if _C is not None and keys and type(keys) is list:
        found = _C.key_times(keys, layout.tags_start - TIMESTAMP_BYTES)
        if found is not None:
            return np.frombuffer(found[0], np.int64), np.frombuffer(found[1], np.int64)
    return key_times_python(layout, keys)


def key_times_python(layout: KeyLayout, keys: list[bytes]) -> tuple[Int64Array, Int64Array]:
    """:func:`key_times`' spec."""
    return np.fromiter(map(len, keys), np.int64, len(keys)), _base_times_s(layout, keys)


def base_times_s(layout: KeyLayout, keys: list[bytes]) -> Int64Array:
    """The base time of each row key (:func:`key_times`)."""
    return key_times(layout, keys)[1]


def _base_times_s(layout: KeyLayout, keys: list[bytes]) -> Int64Array:
    """The base time of each row key (one byte matrix when the keys have one length)."""
    if keys and _one_length(keys):
        matrix = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), -1)
        return matrix_base_times_s(layout, matrix)
    return np.fromiter((_base_time_s(layout, k) for k in keys), np.int64, len(keys))


def matrix_base_times_s(layout: KeyLayout, matrix: U8Array) -> Int64Array:
    """:func:`base_times_s` of keys of one length laid out as a byte matrix (a key a row)."""
    at = layout.tags_start - TIMESTAMP_BYTES
    stamps = np.ascontiguousarray(matrix[:, at : at + TIMESTAMP_BYTES])
    return stamps.view(">u4").reshape(len(matrix)).astype(np.int64)


def _one_length(keys: Sequence[bytes]) -> bool:
    """All keys have the same length (lengths read in C, not a Python set)."""
    lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    return bool(lengths.min() == lengths.max())


def _base_time_s(layout: KeyLayout, key: bytes) -> int:
    start = layout.tags_start
    return int.from_bytes(key[start - TIMESTAMP_BYTES : start], "big")


@dataclass(frozen=True, slots=True, eq=False)
class _Points:
    """Decoded points with their row and offset in the row (ms)."""

    row: IntArray
    offset: IntArray
    doubles: Float64Array
    ints: Int64Array | None
    is_int: BoolArray | None

    def take(self, index: Int64Array | BoolArray) -> _Points:
        return _Points(
            self.row[index],
            self.offset[index],
            self.doubles[index],
            None if self.ints is None else self.ints[index],
            None if self.is_int is None else self.is_int[index],
        )

    @staticmethod
    def concat(pieces: Sequence[_Points]) -> _Points:
        """The pieces' points ordered by row (each row's points come from one piece)."""
        if len(pieces) == 1:
            return pieces[0]
        has_ints = any(p.ints is not None for p in pieces)
        joined = _Points(
            np.concatenate([p.row for p in pieces]),
            np.concatenate([p.offset for p in pieces]),
            np.concatenate([p.doubles for p in pieces]),
            np.concatenate([_ints_of(p) for p in pieces]) if has_ints else None,
            np.concatenate([_is_int_of(p) for p in pieces]) if has_ints else None,
        )
        return joined.take(np.argsort(joined.row, kind="stable"))


def _ints_of(p: _Points) -> Int64Array:
    return p.ints if p.ints is not None else np.zeros(len(p.row), dtype=np.int64)


def _is_int_of(p: _Points) -> BoolArray:
    return p.is_int if p.is_int is not None else np.zeros(len(p.row), dtype=np.bool_)


def _merge(
    rows: Sequence[Row],
    layout: KeyLayout,
    points: _Points,
    cell: Int64Array,
    value_bytes: U64Array,
    value_length: Int64Array,
    fix_duplicates: bool,
) -> _Points:
    """CompactionQueue's merge of rows with unordered or repeated offsets: by offset, a
    point of a later cell first; identical duplicates dropped, others an error unless
    ``fix_duplicates`` (which keeps the first)."""
    # lexsort is stable: within one cell, points keep their stored order.
    order = np.lexsort((-cell, points.offset, points.row))
    points = points.take(order)
    value_bytes, value_length = value_bytes[order], value_length[order]
    row, offset = points.row, points.offset
    first = np.ones(len(row), dtype=np.bool_)
    first[1:] = (row[1:] != row[:-1]) | (offset[1:] != offset[:-1])
    if not first.all() and not fix_duplicates:
        kept = np.maximum.accumulate(np.where(first, np.arange(len(row)), 0))
        conflict = ~first & (
            (value_length != value_length[kept]) | (value_bytes != value_bytes[kept])
        )
        if conflict.any():
            r = int(row[np.flatnonzero(conflict)[0]])
            _scalar_row(rows[r], r, layout, fix_duplicates)  # raises OpenTSDB's message
            raise AssertionError("the scalar decoder accepted a conflicting duplicate")
    return points.take(first)


def _scalar_row(row: Row, index: int, layout: KeyLayout, fix_duplicates: bool) -> _Points:
    """The reference decoder for one unusual row (raises IllegalDataError when corrupt)."""
    base_s = _base_time_s(layout, row.key)
    decoded = decode_cells(
        base_s,
        [(cell.qualifier, cell.value) for cell in row.cells],
        fix_duplicates=fix_duplicates,
        row_key=row.key,
    )
    points = decoded.points
    n = len(points)
    offset = np.fromiter((p.timestamp_ms - base_s * 1000 for p in points), np.int64, n)
    is_int = np.fromiter((not p.is_float for p in points), np.bool_, n)
    ints = np.fromiter((p.value if not p.is_float else 0 for p in points), np.int64, n)
    doubles = np.fromiter((float(p.value) for p in points), np.float64, n)
    doubles[is_int] = ints[is_int].astype(np.float64)
    if not is_int.any():
        return _Points(np.full(n, index, dtype=np.int64), offset, doubles, None, None)
    return _Points(np.full(n, index, dtype=np.int64), offset, doubles, ints, is_int)


def _annotations(
    rows: Sequence[Row], c: _Cells, notes: Int64Array, base_ms: Int64Array
) -> tuple[tuple[int, AnnotationCell], ...]:
    if not len(notes):
        return ()
    flat = [cell for r in rows for cell in r.cells]
    found = []
    for i in notes.tolist():
        r = int(c.row[i])
        cell = flat[i]
        ts = int(base_ms[r]) + decode_annotation_qualifier(cell.qualifier)
        found.append((r, AnnotationCell(ts, cell.qualifier, cell.value)))
    found.sort(key=lambda item: (item[0], item[1].timestamp_ms))
    return tuple(found)
