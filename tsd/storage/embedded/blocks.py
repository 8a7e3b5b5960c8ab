"""Bulk reads for the query path: a scan batch as one CellBlock, built in the reader thread.

The query engine wants cells end to end (CellBlock). Built here, on the reader thread that
read the batch, the join costs the event loop nothing, and the store reads several batches
per thread hop (``EmbeddedStorage.scan_blocks``). The rows are exactly
:func:`tsd.storage.embedded.cells.scan_batch`'s, packed rows unpacked, so every change of
the stored form is made in one place (tests/storage/test_contract.py compares scan_blocks
with scan on random tables).
"""

from __future__ import annotations

from collections.abc import Collection

from tsd.storage.base import CellBlock, RowFilter
from tsd.storage.embedded.cells import ScanCursor, TableInfo, Txn, scan_batch

__all__ = ["scan_block"]


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
    return CellBlock.from_rows(scan_batch(txn, table, position, families, row_filter, max_rows))
