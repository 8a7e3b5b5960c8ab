"""Storing rollup and pre-aggregate points (TSDB.addAggregatePoint): the checks of
:mod:`tsd.protocol.rollup_put`, the series' UIDs, one cell put straight to its table.

OpenTSDB sends each such point to HBase as its own PutRequest, without the compaction
queue, meta tracking or the real-time publisher; so does this writer (no write-ahead log
either: the put is acknowledged once storage holds it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tsd.codec.const import FAMILY
from tsd.codec.rollup import rollup_slot
from tsd.codec.rowkey import KeyLayout, make_series_key
from tsd.storage.base import Delete, Mutation, Put, Storage
from tsd.uid.service import UidService

__all__ = ["PreparedRollupLike", "RollupWriter", "put_rollup_cells", "replace_rollup_cells"]


async def put_rollup_cells(
    storage: Storage, table: str, cells: Sequence[tuple[bytes, bytes, bytes]]
) -> None:
    """Store rollup cells ``(row key, qualifier, value)`` in ``table``: what /api/rollup
    stores for one point, and tsd's own rollups (tsd/query/rollup_compute.py) for many."""
    if cells:
        await storage.put(table, [Put(key, FAMILY, q, v) for key, q, v in cells])


async def replace_rollup_cells(
    storage: Storage, table: str, cells: Sequence[tuple[bytes, bytes, bytes]]
) -> None:
    """Store computed rollup cells in place of those of the same intervals: a stored cell
    of the same aggregator and interval whose value had another width (another qualifier)
    is deleted in the same write."""
    if not cells:
        return
    by_row: dict[bytes, dict[bytes, bytes]] = {}
    for key, qualifier, value in cells:
        by_row.setdefault(key, {})[qualifier] = value
    stored = {row.key: row for row in await storage.get_many(table, list(by_row), (FAMILY,))}
    # row after row (a store that keeps a row's cells together rewrites each row once)
    mutations: list[Mutation] = []
    for key, new in by_row.items():
        mutations.extend(Put(key, FAMILY, q, v) for q, v in new.items())
        row = stored.get(key)
        if row is not None:
            wanted = {rollup_slot(q) for q in new}
            mutations.extend(
                Delete(key, FAMILY, c.qualifier)
                for c in row.cells
                if c.qualifier not in new and rollup_slot(c.qualifier) in wanted
            )
    await storage.mutate(table, mutations)


class PreparedRollupLike(Protocol):
    """A checked rollup cell (tsd.protocol.rollup_put.PreparedRollup; write/ does not
    import protocol/)."""

    @property
    def table(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def tags(self) -> Sequence[tuple[str, str]]: ...
    @property
    def base_time(self) -> int: ...
    @property
    def qualifier(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...


class RollupWriter:
    """Writes prepared rollup cells; raises NoSuchUniqueName, UidAssignmentError or
    StorageError."""

    def __init__(self, storage: Storage, uids: UidService, layout: KeyLayout) -> None:
        self._storage = storage
        self._uids = uids
        self._layout = layout

    async def row_key(self, point: PreparedRollupLike) -> bytes:
        """The row key of the point's series at its base time (UIDs assigned as for a put)."""
        metric_uid, pairs = await self._uids.resolve_for_write(point.metric, point.tags)
        return make_series_key(self._layout, metric_uid, pairs).row_key(point.base_time)

    async def write_cell(self, point: PreparedRollupLike) -> None:
        key = await self.row_key(point)
        await put_rollup_cells(self._storage, point.table, [(key, point.qualifier, point.value)])
