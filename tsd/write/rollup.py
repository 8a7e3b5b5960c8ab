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
from tsd.codec.rowkey import KeyLayout, make_series_key
from tsd.storage.base import Put, Storage
from tsd.uid.service import UidService

__all__ = ["PreparedRollupLike", "RollupWriter"]


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

    async def write(self, point: PreparedRollupLike) -> None:
        key = await self.row_key(point)
        await self._storage.put(point.table, [Put(key, FAMILY, point.qualifier, point.value)])
