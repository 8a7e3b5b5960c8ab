"""Bulk reads for the query path: scanned rows straight into a CellBlock (runs in a read
transaction on a reader thread).

:func:`tsd.storage.embedded.cells.scan_batch` builds a ``Row`` of ``Cell`` objects per
row, which the query engine then joins end to end again (``CellBlock.from_rows``): about
four microseconds per compacted row of Python allocation and copying. :func:`scan_block`
reads the same rows, in the same batches, into the CellBlock's lists directly: one
``iternext`` loop appending each cell's qualifier and value, the row work (split, filter,
batch limits) once per row. Same answer as ``scan_batch`` (tests/storage/test_blocks.py
compares them on random tables).

This module only reads LMDB entries through :mod:`tsd.storage.embedded.keys` (the key
layout and the bucket values); a change of the stored value encoding goes in
:func:`_cells_of_entry` (the one place a stored value becomes cell values).
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterator
from typing import Any

import lmdb
import numpy as np

from tsd.errors import StorageError
from tsd.storage.base import CellBlock, RowFilter
from tsd.storage.embedded.cells import MAX_BATCH_CELLS, ScanCursor, TableInfo, Txn, read_batch
from tsd.storage.embedded.keys import (
    KEY_LIMIT,
    ROW_END,
    decode_bucket,
    row_after,
    split_row,
    unescape_row,
)

__all__ = ["scan_block"]

try:
    _C: Any = importlib.import_module("tsd.storage.embedded._blocks")
except ImportError:  # pragma: no cover - built by setup.py wherever a C compiler is
    _C = None


def scan_block(
    txn: Txn,
    table: TableInfo,
    position: ScanCursor,
    families: Collection[str],
    row_filter: RowFilter | None,
    max_rows: int,
) -> CellBlock:
    """``scan_batch`` as one CellBlock: up to ``max_rows`` whole rows from ``position``
    (also ending at the first row boundary past ``MAX_BATCH_CELLS`` cells), advancing it."""
    out = _BlockBuilder(table, families)
    if _C is not None and row_filter is None:
        compiled: list[CellBlock] = []

        def read_compiled(cursor: lmdb.Cursor[bytes], max_rows: int) -> bytes | None:
            block = _compiled(cursor, out, position, max_rows)
            if block is None:  # something corrupt: the Python loop raises its error
                return out.read(cursor.iternext(), position, row_filter, max_rows)
            compiled.append(block)
            return None

        read_batch(txn, table, position, max_rows, read_compiled, _RowCount(compiled))
        return compiled[0] if compiled else out.block()

    def read(cursor: lmdb.Cursor[bytes], max_rows: int) -> bytes | None:
        return out.read(cursor.iternext(), position, row_filter, max_rows)

    read_batch(txn, table, position, max_rows, read, out.keys)
    return out.block()


class _RowCount:
    """The rows of the compiled read's block (read_batch counts them against the limit)."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: list[CellBlock]) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return sum(len(b) for b in self.blocks)


def _compiled(
    cursor: lmdb.Cursor[bytes], out: _BlockBuilder, position: ScanCursor, max_rows: int
) -> CellBlock | None:
    """The batch read by the C helper (_blocks.c); None, the cursor back where it was, when
    it met a corrupt key or bucket."""
    start = cursor.key()
    found = _C.scan_entries(
        cursor.iternext(), position.stop_key, max_rows, MAX_BATCH_CELLS, out.names
    )
    if isinstance(found, str):
        cursor.set_range(start)
        return None
    keys, counts, findex, qlen, vlen, quals, vals, batch_cells, next_key = found
    position.batch_cells = batch_cells
    position.next_key = next_key
    return CellBlock(
        keys,
        np.frombuffer(counts, dtype=np.int64),
        out.family_names,
        np.frombuffer(findex, dtype=np.uint8),
        np.frombuffer(qlen, dtype=np.int64),
        np.frombuffer(vlen, dtype=np.int64),
        quals,
        vals,
    )


class _BlockBuilder:
    """The lists of a CellBlock being filled."""

    __slots__ = ("counts", "family_index", "family_names", "keys", "names", "quals", "vals")

    def __init__(self, table: TableInfo, families: Collection[str]) -> None:
        # stored family bytes -> index into the block's families; None: not wanted
        self.names: dict[bytes, int | None] = {}
        self.family_names: list[str] = []
        for stored, name in table.names.items():
            if families and name not in families:
                self.names[stored] = None
            else:
                self.names[stored] = len(self.family_names)
                self.family_names.append(name)
        self.keys: list[bytes] = []
        self.counts: list[int] = []
        self.family_index: list[int] = []
        self.quals: list[bytes] = []
        self.vals: list[bytes] = []

    def read(
        self,
        entries: Iterator[tuple[bytes, bytes]],
        position: ScanCursor,
        row_filter: RowFilter | None,
        max_rows: int,
    ) -> bytes | None:
        """Rows from the cursor's entries; the key to seek to next, or None when done (sets
        ``position.next_key`` when it stops at a row boundary with rows still to read)."""
        keys, counts, quals, vals, findex = (
            self.keys,
            self.counts,
            self.quals,
            self.vals,
            self.family_index,
        )
        names = self.names
        stop = position.stop_key
        keys_append, quals_append, vals_append, findex_append = (
            keys.append,
            quals.append,
            vals.append,
            findex.append,
        )
        prefix = b""  # the current row's smallest key: escaped row + 00 00
        family_prefix = b""  # prefix + family + 00 of the current cells
        family = -1  # index of the current family in the block, -1: not wanted
        qualifier_at = 0
        row_cells = 0  # cells of the current row so far
        batch_cells = position.batch_cells
        # The last family seen (stored name + 00) and its index: rows repeat it.
        last_family = b"\x00"
        last_found: int | None = -2
        try:
            for key, value in entries:
                if family_prefix and key.startswith(family_prefix) and len(key) < KEY_LIMIT:
                    if family >= 0:
                        quals_append(key[qualifier_at:])
                        vals_append(value)
                        findex_append(family)
                        row_cells += 1
                    continue
                if not prefix or not key.startswith(prefix):
                    if row_cells:
                        counts.append(row_cells)
                        batch_cells += row_cells
                        row_cells = 0
                    elif prefix:
                        keys.pop()  # the previous row had no wanted cell
                    if stop is not None and key >= stop:
                        return None
                    end = key.find(ROW_END)
                    if end < 0:
                        split_row(key)  # raises the corrupt-key error
                    row = unescape_row(key[:end])
                    prefix = key[: end + 2]
                    family_prefix = b""
                    if len(keys) >= max_rows or batch_cells >= MAX_BATCH_CELLS:
                        position.next_key = prefix
                        return None
                    if row_filter is not None and not row_filter.matches(row):
                        prefix = b""
                        return row_after(row)
                    keys_append(row)
                family_at = len(prefix)
                if key.startswith(last_family, family_at):
                    found = last_found
                    qualifier_at = family_at + len(last_family)
                else:
                    family_end = key.find(b"\x00", family_at)
                    stored = key[family_at:family_end]
                    found = names.get(stored, -2)
                    if found == -2:
                        raise StorageError(f"corrupt embedded key (unknown family): {key[:64]!r}")
                    last_family, last_found = stored + b"\x00", found
                    qualifier_at = family_end + 1
                family = -1 if found is None else found
                family_prefix = key[:qualifier_at]
                if family < 0:
                    continue
                if len(key) == KEY_LIMIT:  # a bucket: its cells are in the value
                    pairs = decode_bucket(value)
                    quals.extend(q for q, _ in pairs)
                    vals.extend(v for _, v in pairs)
                    findex.extend([family] * len(pairs))
                    row_cells += len(pairs)
                else:
                    quals_append(key[qualifier_at:])
                    vals_append(value)
                    findex_append(family)
                    row_cells += 1
            if row_cells:
                counts.append(row_cells)
                batch_cells += row_cells
            elif prefix:
                keys.pop()
            return None
        finally:
            position.batch_cells = batch_cells

    def block(self) -> CellBlock:
        n = len(self.quals)
        return CellBlock(
            self.keys,
            np.array(self.counts, dtype=np.int64),
            self.family_names,
            np.array(self.family_index, dtype=np.uint8),
            np.fromiter(map(len, self.quals), np.int64, n),
            np.fromiter(map(len, self.vals), np.int64, n),
            b"".join(self.quals),
            b"".join(self.vals),
        )
