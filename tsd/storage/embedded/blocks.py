"""Bulk reads for the query path: a scan batch as one CellBlock, built in the reader thread.

The query engine wants cells end to end (CellBlock). Built here, on the reader thread that
read the batch, the join costs the event loop nothing, and the store reads several batches
per thread hop (``EmbeddedStorage.scan_blocks``). The rows are exactly
:func:`tsd.storage.embedded.cells.scan_batch`'s (tests/storage/test_contract.py compares
scan_blocks with scan on random tables).

The usual batch of a query, rows that hold only their packed entry (compacted data, no
single cells, no filter or one every key passes), is read from the packed database alone
and decoded together straight into points (a PointBlock, :mod:`tsd.storage.embedded.points`),
or, when an entry is not one that path takes, unpacked together into the block's cell
columns (:func:`tsd.storage.embedded.packed.unpack_many`): no Row or Cell object per row.
Anything
else in the batch's key range (a plain cell, a key that does not read) sends the batch
through ``scan_batch``, which decides as a scan does.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections.abc import Collection
from typing import cast

import lmdb
import numpy as np

from tsd.storage.base import Block, CellBlock, RowFilter
from tsd.storage.embedded import packed, points
from tsd.storage.embedded.cells import (
    MAX_BATCH_CELLS,
    ScanCursor,
    TableInfo,
    Txn,
    read_rows,
    scan_batch,
)
from tsd.storage.embedded.keys import PACKED_END, PACKED_FAMILY, cell_prefix, packed_key

__all__ = ["PackedRun", "rows_block", "scan_block"]

_PACKED_NAME = PACKED_FAMILY.encode("ascii")
_PACKED_FAMILY_END = _PACKED_NAME + PACKED_END


def scan_block(
    txn: Txn,
    table: TableInfo,
    position: ScanCursor,
    families: Collection[str],
    row_filter: RowFilter | None,
    max_rows: int,
) -> Block:
    """``scan_batch`` as one CellBlock: up to ``max_rows`` whole rows from ``position``
    (also ending at the first row boundary past ``MAX_BATCH_CELLS`` cells), advancing it.

    With a row filter, the packed path takes the batch when the filter passes every key (a
    range the query path knows holds only matching rows: one series' rows hour by hour);
    otherwise ``scan_batch`` reads it, the filter choosing its rows."""
    if not families or PACKED_FAMILY in families:
        block = _packed_only(txn, table, position, max_rows, row_filter)
        if block is not None:
            return block
    return CellBlock.from_rows(scan_batch(txn, table, position, families, row_filter, max_rows))


def _packed_only(
    txn: Txn, table: TableInfo, position: ScanCursor, max_rows: int, row_filter: RowFilter | None
) -> Block | None:
    """The batch when every row in its key range is one packed entry (and passes
    ``row_filter``); None (``position`` untouched) otherwise (:class:`PackedRun`)."""
    run = PackedRun(txn, table)
    if not run.take(position, max_rows, row_filter):
        return None
    return run.block()


class PackedRun:
    """Batches of packed-only rows (several ranges' in turn: ``scan_ranges``) decoded
    together: one :func:`points.decode` (and one block) for all of them, not one per range
    (a day of one series is 24 ranges of one row each).

    :meth:`take` reads one batch the way :func:`scan_block`'s packed path does; the entries
    are taken from the cursor in one call and their keys read together
    (:func:`points.packed_rows`): no Python per entry."""

    __slots__ = ("_packed", "_plain", "_table", "_txn", "rows", "values")

    def __init__(self, txn: Txn, table: TableInfo) -> None:
        self._txn = txn
        self._table = table
        self._packed: lmdb.Cursor | None = None
        self._plain: lmdb.Cursor | None = None
        #: the rows taken so far and their packed entries
        self.rows: list[bytes] = []
        self.values: list[bytes] = []

    def take(self, position: ScanCursor, max_rows: int, row_filter: RowFilter | None) -> bool:
        """The batch from ``position`` added (``position`` advanced) when every row in its
        key range is one packed entry and passes ``row_filter``; False (``position``
        untouched) otherwise: ``scan_batch``'s job."""
        table = self._table
        seek = position.next_key
        if table.packed is None or seek is None or _PACKED_NAME not in table.names:
            return False
        if position.remaining is not None:
            max_rows = min(max_rows, position.remaining)
        # a packed entry counts as one cell, as scan_batch counts it
        take = min(max_rows, MAX_BATCH_CELLS)
        stop = position.stop_key
        if self._packed is None:
            self._packed = self._txn.cursor(db=table.packed)
        with _TAKING if take >= TAKE_ALONE_FROM else contextlib.nullcontext():
            found = _entries(self._packed, seek, stop, take + 1)
        read = points.packed_rows(found, _PACKED_FAMILY_END)
        if read is None:
            return False  # not a packed data entry: scan_batch reads (or refuses) it
        rows, values = read
        next_key: bytes | None = None
        if len(rows) > take:  # the first row of the next batch
            next_key = found[take][0][: -len(_PACKED_FAMILY_END)]
            del rows[take:], values[take:]
        if row_filter is not None and not all(map(row_filter.matches, rows)):
            return False  # rows the filter leaves out: scan_batch's
        # Plain cells anywhere in the batch's range: rows of another shape, scan_batch's job.
        if self._plain is None:
            self._plain = self._txn.cursor(db=table.db)
        if self._plain.set_range(seek):
            first = cast(bytes, self._plain.key())  # no buffers (see _entries)
            bound = next_key if next_key is not None else stop
            if bound is None or first < bound:
                return False
        position.next_key = next_key
        position.batch_cells = len(rows)
        if position.remaining is not None:
            position.remaining -= len(rows)
            if position.remaining <= 0:
                position.next_key = None
        self.rows += rows
        self.values += values
        return True

    def block(self) -> Block:
        """The rows taken so far as one block (points, or cells when an entry is not one
        :func:`points.decode` takes), and the run emptied."""
        rows, values = self.rows, self.values
        self.rows, self.values = [], []
        found_points = points.decode(rows, values, lambda: _unpacked(rows, values))
        return found_points if found_points is not None else _unpacked(rows, values)


#: Held while a batch of at least :data:`TAKE_ALONE_FROM` entries is taken from a cursor:
#: one reader thread at a time. py-lmdb lets go of the GIL at every cursor step, so two
#: threads taking entries at once hand it back and forth entry by entry (two threads took
#: 14-17 ms of wall and 19-21 ms of CPU for the 24,000 entries one thread takes in 9); held
#: by one, the other thread meanwhile decodes its batch, which runs without the GIL. A
#: written-out day of 1,000 series summed at 1m: 51.5 ms p50 against 57.8 (77 against 83 ms
#: of CPU), bench.query_matrix --baseline in the same rounds.
_TAKING = threading.Lock()
#: Smaller takes never wait for :data:`_TAKING`: a filter's few rows, and the first hop of
#: ``scan_ranges``, which runs on the event loop (``storage.INLINE_ROWS`` rows at most,
#: fewer than this: tests/storage/test_embedded_points.py checks it), where a wait would
#: stall every other client.
TAKE_ALONE_FROM = 256

#: entries taken from the cursor by the first call of :func:`_entries`; each next call takes
#: four times more (a small scan reads little past its stop, a big one makes few calls): a
#: range of one row (a series' hour: ``scan_ranges``) copies that row and the next entry,
#: not 64 values of a few KB each
_FIRST_ENTRIES = 2


def _entries(
    cursor: lmdb.Cursor, seek: bytes, stop: bytes | None, limit: int
) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` (key, value) entries from ``seek`` on, before ``stop``; taken from
    the cursor a list at a time (``islice``), not an entry per Python step."""
    found: list[tuple[bytes, bytes]] = []
    if not cursor.set_range(seek):
        return found
    entries = cursor.iternext()
    chunk = _FIRST_ENTRIES
    while len(found) < limit:
        # bytes, not memoryviews: the store's read transactions are opened without buffers
        part = cast(
            list[tuple[bytes, bytes]],
            list(itertools.islice(entries, min(chunk, limit - len(found)))),
        )
        found += part
        if len(part) < chunk or (stop is not None and part[-1][0] >= stop):
            break
        chunk *= 4
    if stop is not None and found and found[-1][0] >= stop:
        del found[bisect.bisect_left(found, (stop,)) :]  # (key,) sorts before (key, value)
    return found


def _unpacked(rows: list[bytes], values: list[bytes]) -> CellBlock:
    """The block of ``rows``, each holding only the packed entry of the same index. Entries
    in the group form (rows packed whole: rollups) give their columns as they are."""
    if values and all(packed.is_group(v) for v in values):
        return _grouped(rows, values)
    unpacked = packed.unpack_many(values)
    quals = [q for pairs in unpacked for q, _ in pairs]
    vals = [v for pairs in unpacked for _, v in pairs]
    n = len(quals)
    return CellBlock(
        rows,
        np.fromiter(map(len, unpacked), np.int64, len(unpacked)),
        [PACKED_FAMILY] if n else [],
        np.zeros(n, dtype=np.uint8),
        np.fromiter(map(len, quals), np.int64, n),
        np.fromiter(map(len, vals), np.int64, n),
        b"".join(quals),
        b"".join(vals),
    )


def rows_block(
    txn: Txn, table: TableInfo, rows: tuple[bytes, ...], families: Collection[str]
) -> CellBlock:
    """``read_rows`` as one CellBlock. Rows of one family packed whole (rollups: a month
    of hourly cells in one group entry) are read as the entries' columns, no Cell object
    per cell; any other shape goes through ``read_rows``."""
    if len(families) == 1 and table.packed is not None:
        (family,) = families
        if family in table.grouped:
            block = _group_rows(txn, table, rows, family)
            if block is not None:
                return block
    return CellBlock.from_rows(read_rows(txn, table, rows, families))


def _group_rows(
    txn: Txn, table: TableInfo, rows: tuple[bytes, ...], family: str
) -> CellBlock | None:
    """The rows that hold ``family``'s group entry and no plain cell of it; None when a
    row holds a plain cell of the family or an entry not in the group form."""
    plain = txn.cursor(db=table.db)
    found: list[bytes] = []
    values: list[bytes] = []
    for row in rows:
        prefix = cell_prefix(row, family)
        if plain.set_range(prefix) and plain.key().startswith(prefix):
            return None
        value = txn.get(packed_key(row, family), db=table.packed)
        if value is None:
            continue
        if not packed.is_group(value):
            return None
        found.append(row)
        values.append(value)
    return _grouped(found, values, family) if found else CellBlock.empty()


def _grouped(rows: list[bytes], values: list[bytes], family: str = PACKED_FAMILY) -> CellBlock:
    columns = [packed.group_columns(v) for v in values]
    counts = np.fromiter((len(c[0]) for c in columns), np.int64, len(columns))
    n = int(counts.sum())
    return CellBlock(
        rows,
        counts,
        [family] if n else [],
        np.zeros(n, dtype=np.uint8),
        np.concatenate([c[0] for c in columns]),
        np.concatenate([c[1] for c in columns]),
        b"".join(c[2] for c in columns),
        b"".join(c[3] for c in columns),
    )
