"""CellBlock: rows read in bulk, their cells laid end to end (columnar), not one object each.

A scan of 360,000 single cells as :class:`~tsd.storage.base.Row` / ``Cell`` objects costs
about a microsecond of Python per cell before any decoding starts; the query engine wants
the cells end to end anyway (:mod:`tsd.query.decode`). A CellBlock holds, for R rows and
C cells: the R row keys, the cells per row, and per cell its family (an index into
``families``), qualifier length and value length, with all qualifiers joined in one bytes
object and all values in another. The HBase backend fills one straight from the Thrift reply
bytes (tsd/storage/hbase/rows.py); :meth:`CellBlock.from_rows` builds one from rows for the
other backends.

A CellBlock is also a ``Sequence[Row]`` whose rows are built on demand, for the rare code
paths that want one row's cells as objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from tsd.storage.base import Cell, Row

__all__ = ["CellBlock", "ReadStats"]

I64 = npt.NDArray[np.int64]
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class CellBlock(Sequence[Row]):
    """R rows and their C cells, end to end; cells of a row in (family, qualifier) order."""

    keys: list[bytes]
    counts: I64  # R: cells per row
    families: list[str]
    family_index: npt.NDArray[np.uint8]  # C: index into families
    qualifier_lengths: I64  # C
    value_lengths: I64  # C
    qualifiers: bytes
    values: bytes
    #: bytes received from storage for these rows (0 when unknown)
    wire_bytes: int = 0

    @property
    def cell_count(self) -> int:
        return len(self.qualifier_lengths)

    @property
    def stored_bytes(self) -> int:
        """Key, qualifier and value bytes of every cell (what the query byte limit counts)."""
        keys = int(np.dot(np.fromiter(map(len, self.keys), np.int64, len(self.keys)), self.counts))
        return keys + len(self.qualifiers) + len(self.values)

    # -- Sequence[Row] --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        first, last = self._cell_range(index)
        return Row(self.keys[index], tuple(self._cells(first, last)))

    def __iter__(self) -> Iterator[Row]:
        cells = self._cells(0, self.cell_count)
        for key, count in zip(self.keys, self.counts.tolist(), strict=True):
            yield Row(key, tuple(next(cells) for _ in range(count)))

    def _cell_range(self, row: int) -> tuple[int, int]:
        first = int(self.counts[:row].sum())
        return first, first + int(self.counts[row])

    def _cells(self, first: int, last: int) -> Iterator[Cell]:
        q_at = int(self.qualifier_lengths[:first].sum())
        v_at = int(self.value_lengths[:first].sum())
        for i in range(first, last):
            ql, vl = int(self.qualifier_lengths[i]), int(self.value_lengths[i])
            family = self.families[int(self.family_index[i])]
            yield Cell(family, self.qualifiers[q_at : q_at + ql], self.values[v_at : v_at + vl])
            q_at += ql
            v_at += vl

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def from_rows(cls, rows: Sequence[Row], wire_bytes: int = 0) -> CellBlock:
        """The rows' cells end to end (one Python pass over the cells)."""
        if isinstance(rows, CellBlock):
            return rows
        families: dict[str, int] = {}
        cells = [c for r in rows for c in r.cells]
        quals = [c.qualifier for c in cells]
        vals = [c.value for c in cells]
        index = [families.setdefault(c.family, len(families)) for c in cells]
        n = len(cells)
        return cls(
            [r.key for r in rows],
            np.fromiter((len(r.cells) for r in rows), np.int64, len(rows)),
            list(families),
            np.array(index, dtype=np.uint8) if n else np.zeros(0, np.uint8),
            np.fromiter(map(len, quals), np.int64, n),
            np.fromiter(map(len, vals), np.int64, n),
            b"".join(quals),
            b"".join(vals),
            wire_bytes,
        )

    @classmethod
    def empty(cls) -> CellBlock:
        return cls([], _EMPTY, [], np.zeros(0, np.uint8), _EMPTY, _EMPTY, b"", b"")

    @classmethod
    def concat(cls, blocks: Sequence[CellBlock]) -> CellBlock:
        """One block of the blocks' rows, in order."""
        blocks = [b for b in blocks if len(b)]
        if not blocks:
            return cls.empty()
        if len(blocks) == 1:
            return blocks[0]
        families: list[str] = []
        remapped = []
        for b in blocks:
            mapping = np.array([_index_of(families, f) for f in b.families] or [0], dtype=np.uint8)
            remapped.append(mapping[b.family_index] if b.cell_count else b.family_index)
        return cls(
            [k for b in blocks for k in b.keys],
            np.concatenate([b.counts for b in blocks]),
            families,
            np.concatenate(remapped),
            np.concatenate([b.qualifier_lengths for b in blocks]),
            np.concatenate([b.value_lengths for b in blocks]),
            b"".join(b.qualifiers for b in blocks),
            b"".join(b.values for b in blocks),
            sum(b.wire_bytes for b in blocks),
        )

    def take(self, rows: Sequence[int] | npt.NDArray[Any]) -> CellBlock:
        """The block of the given rows (in the order given)."""
        picked = np.asarray(rows, dtype=np.int64)
        if len(picked) == len(self) and (picked == np.arange(len(self))).all():
            return self
        cell_start = np.zeros(len(self) + 1, np.int64)
        np.cumsum(self.counts, out=cell_start[1:])
        counts = self.counts[picked]
        # the picked cells' indices: each picked row's range, end to end
        cells = _ranges(cell_start[picked], counts)
        q_start = np.zeros(self.cell_count + 1, np.int64)
        np.cumsum(self.qualifier_lengths, out=q_start[1:])
        v_start = np.zeros(self.cell_count + 1, np.int64)
        np.cumsum(self.value_lengths, out=v_start[1:])
        qlen = self.qualifier_lengths[cells]
        vlen = self.value_lengths[cells]
        qbuf = np.frombuffer(self.qualifiers, np.uint8)
        vbuf = np.frombuffer(self.values, np.uint8)
        return CellBlock(
            [self.keys[i] for i in picked.tolist()],
            counts,
            self.families,
            self.family_index[cells],
            qlen,
            vlen,
            qbuf[_ranges(q_start[cells], qlen)].tobytes(),
            vbuf[_ranges(v_start[cells], vlen)].tobytes(),
            self.wire_bytes,
        )


@dataclass(slots=True)
class ReadStats:
    """What reading data cost one query, added up over its storage calls.

    ``cells``/``rows``: data cells and rows received; ``key_rows``: rows received as keys
    only (a key-only pass); ``wire_bytes``: reply bytes received; ``decode_s``: CPU time
    spent turning reply bytes into cells.
    """

    rows: int = 0
    cells: int = 0
    key_rows: int = 0
    wire_bytes: int = 0
    decode_s: float = 0.0
    calls: int = 0
    #: how the rows were chosen (the query layer's read path), for showStats
    path: str = ""

    def add(self, block: CellBlock, decode_s: float) -> None:
        self.rows += len(block)
        self.cells += block.cell_count
        self.wire_bytes += block.wire_bytes
        self.decode_s += decode_s
        self.calls += 1


def _index_of(names: list[str], name: str) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def _ranges(starts: I64, lengths: I64) -> I64:
    """The indices start[i] .. start[i] + length[i] - 1 for every i, end to end."""
    total = int(lengths.sum())
    if total == 0:
        return _EMPTY
    offsets = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)
