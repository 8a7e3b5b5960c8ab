"""Storing rollup and pre-aggregate points (TSDB.addAggregatePoint): the checks of
:mod:`tsd.protocol.rollup_put`, the series' UIDs, one cell put straight to its table.

OpenTSDB sends each such point to HBase as its own PutRequest, without the compaction
queue, meta tracking or the real-time publisher; so does this writer (no write-ahead log
either: the put is acknowledged once storage holds it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from tsd.codec.const import FAMILY
from tsd.codec.rollup import rollup_slot
from tsd.codec.rowkey import KeyLayout, make_series_key
from tsd.storage.base import CellBlock, Delete, Mutation, Put, Storage
from tsd.uid.service import UidService

__all__ = [
    "PreparedRollupLike",
    "RollupWriter",
    "put_rollup_cells",
    "replace_rollup_cells",
    "stale_cells",
]


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
    is deleted in the same write (:func:`stale_cells`)."""
    if not cells:
        return
    by_row: dict[bytes, dict[bytes, bytes]] = {}
    for key, qualifier, value in cells:
        by_row.setdefault(key, {})[qualifier] = value
    stale = stale_cells(await storage.get_blocks(table, list(by_row), (FAMILY,)), by_row)
    # row after row (a store that keeps a row's cells together rewrites each row once)
    mutations: list[Mutation] = []
    for key, new in by_row.items():
        mutations.extend(Put(key, FAMILY, q, v) for q, v in new.items())
        mutations.extend(Delete(key, FAMILY, q) for q in stale.get(key, ()))
    await storage.mutate(table, mutations)


#: rollup qualifiers as OpenTSDB 2.4 writes them with aggregation ids: the id, then the
#: offset and flags in two bytes (codec/rollup.py)
_ID_QUALIFIER_BYTES = 3


def stale_cells(
    stored: CellBlock, new: Mapping[bytes, Mapping[bytes, bytes]]
) -> dict[bytes, list[bytes]]:
    """Per row, the stored qualifiers a write of ``new`` replaces without overwriting them:
    those of a slot (:func:`~tsd.codec.rollup.rollup_slot`) a new cell takes under another
    qualifier. :func:`stale_cells_one_by_one` is the rule; rows of id qualifiers (a month
    of hourly cells per row, read again with every row-hour written) are done in columns."""
    if not len(stored):
        return {}
    if (stored.qualifier_lengths == _ID_QUALIFIER_BYTES).all():
        return _stale_in_columns(stored, new)
    return stale_cells_one_by_one(stored, new)


def stale_cells_one_by_one(
    stored: CellBlock, new: Mapping[bytes, Mapping[bytes, bytes]]
) -> dict[bytes, list[bytes]]:
    """:func:`stale_cells`' specification, a stored cell at a time."""
    out: dict[bytes, list[bytes]] = {}
    for row in stored:
        cells = new[row.key]
        wanted = {rollup_slot(q) for q in cells}
        found = [
            c.qualifier
            for c in row.cells
            if c.qualifier not in cells and rollup_slot(c.qualifier) in wanted
        ]
        if found:
            out[row.key] = found
    return out


def _stale_in_columns(
    stored: CellBlock, new: Mapping[bytes, Mapping[bytes, bytes]]
) -> dict[bytes, list[bytes]]:
    """:func:`stale_cells` of a block of 3-byte qualifiers: each cell's (row, qualifier)
    and (row, slot) as integers, looked up among the new cells' at once. (A new qualifier
    of another length has another slot than any 3-byte one: it replaces none of them.)"""
    width = _ID_QUALIFIER_BYTES
    row_of = np.repeat(np.arange(len(stored), dtype=np.int64), stored.counts)
    grid = np.frombuffer(stored.qualifiers, np.uint8).reshape(-1, width).astype(np.int64)
    qualifiers = (row_of << 24) | (grid[:, 0] << 16) | (grid[:, 1] << 8) | grid[:, 2]
    asked = [
        (index << 24) | int.from_bytes(q, "big")
        for index, key in enumerate(stored.keys)
        for q in new[key]
        if len(q) == width
    ]
    new_qualifiers = np.array(asked, dtype=np.int64)
    slot = ~np.int64(0x0F)  # rollup_slot: the low four bits of the last byte are the flags
    stale = np.isin(qualifiers & slot, new_qualifiers & slot) & ~np.isin(qualifiers, new_qualifiers)
    out: dict[bytes, list[bytes]] = {}
    quals = stored.qualifiers
    for cell in np.flatnonzero(stale).tolist():
        key = stored.keys[int(row_of[cell])]
        out.setdefault(key, []).append(quals[cell * width : (cell + 1) * width])
    return out


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
