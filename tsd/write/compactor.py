"""Rewriting closed rows as one compacted cell each, as OpenTSDB's CompactionQueue does.

For each row: read its ``t`` cells, merge the data cells with :func:`tsd.codec.compact_row`
(OpenTSDB's byte format and duplicate rules), write the compacted cell, and only once that
write is durable delete the cells it replaced. A reader running meanwhile sees the single
cells, or the single cells and the compacted cell (duplicates that readers drop, as they
are identical), or the compacted cell alone; never a row with points missing.

Rows are handled in chunks: one ``get_many``, one ``put`` of every compacted cell of the
chunk, then one ``delete`` of every replaced cell. A row that cannot be compacted (a
duplicate timestamp with two values and ``tsd.storage.fix_duplicates`` off, a corrupt
cell) is left as it is and counted, as OpenTSDB leaves it.

Rows holding append cells or other non-data cells keep those cells: only the even-length
(data) qualifiers are merged and deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from tsd.codec import compact_row
from tsd.codec.const import FAMILY as DATA_FAMILY
from tsd.errors import CodecError, StorageError
from tsd.log import WRITER, get_logger
from tsd.stats import StatsRegistry
from tsd.storage.base import Delete, Put, Row, Storage

#: Column family of data points (TSDB.FAMILY).
#: Rows per read / write round.
CHUNK_ROWS = 256

log = get_logger(WRITER)


class Compactor:
    """Compacts given rows of the data table."""

    def __init__(
        self, storage: Storage, table: str, registry: StatsRegistry, *, fix_duplicates: bool
    ) -> None:
        self._storage = storage
        self._table = table
        self._fix_duplicates = fix_duplicates
        self._compacted = registry.counter("compaction.count", type="rows")
        self._skipped = registry.counter("compaction.count", type="untouched")
        self._deleted = registry.counter("compaction.writes", type="delete")
        self._duplicates = registry.counter("compaction.errors", type="duplicates")
        self._errors = registry.counter("compaction.errors", type="storage")

    async def compact(self, rows: Sequence[bytes]) -> None:
        """Compact ``rows`` (sorted keys preferred); storage errors are logged, not raised."""
        for start in range(0, len(rows), CHUNK_ROWS):
            chunk = rows[start : start + CHUNK_ROWS]
            try:
                await self._compact_chunk(chunk)
            except StorageError as exc:
                self._errors.inc()
                log.warning("compaction.failed", rows=len(chunk), error=str(exc))

    async def _compact_chunk(self, keys: Sequence[bytes]) -> None:
        found = await self._storage.get_many(self._table, keys, (DATA_FAMILY,))
        puts: list[Put] = []
        deletes: list[Delete] = []
        for row in found:
            self._plan(row, puts, deletes)
        if puts:
            await self._storage.put(self._table, puts)
        if deletes:
            # Only after the compacted cells are durable.
            await self._storage.delete(self._table, deletes)
            self._deleted.inc(len(deletes))

    def _plan(self, row: Row, puts: list[Put], deletes: list[Delete]) -> None:
        data = [
            (cell.qualifier, cell.value)
            for cell in row.cells
            if cell.family == DATA_FAMILY and len(cell.qualifier) % 2 == 0
        ]
        if len(data) < 2:
            self._skipped.inc()  # one cell: single point or already compacted
            return
        try:
            compacted = compact_row(data, self._fix_duplicates, row_key=row.key)
        except CodecError as exc:
            self._duplicates.inc()
            log.warning("compaction.row_refused", row=row.key.hex(), error=str(exc))
            return
        if compacted is None:
            return
        qualifier, value = compacted
        puts.append(Put(row.key, DATA_FAMILY, qualifier, value))
        deletes.extend(Delete(row.key, DATA_FAMILY, old) for old, _ in data if old != qualifier)
        self._compacted.inc()
