"""Retention of the embedded store: drop the rows of every time series table (data, rollup
and pre-aggregate tables) whose whole span ended before ``tsd.storage.embedded.retention``.

**One rule for every table.** A row is dropped once its whole span ends at or before the
cut-off (``now - retention``): the data table's row of an hour, a rollup or pre-aggregate
table's row of its configured ``rowSpan`` (``6h``, ``1d``; ``1n`` and ``1y`` by their real
calendar end). Rows are keyed by their span's start, so the rows dropped are exactly those
based before :func:`first_kept`, the base time of the row holding the cut-off. A rollup row
still partly inside the retention window stays whole: rollups outlive the raw data by up to
one row span (docs/rollups.md).

Every such key is ``[salt] metric base_time tags`` (docs/format/rowkey.md; a rollup row key
is its series' data row key with the span's base time), so the rows of one metric (and salt
bucket) before a cut-off are one contiguous key range ``[prefix + 00000000, prefix +
first_kept)``. A pass finds each prefix of each table with a one-row key scan and deletes
its expired range with :meth:`~tsd.storage.base.Storage.delete_range` (the embedded store
walks it once in one write transaction; LMDB reuses the freed pages). A pass costs one seek
per metric per table plus the rows it drops, and runs when the cut-off reaches a new hour
(every span's rows start on an hour, so no table's rows expire in between).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Protocol

from tsd.codec import KeyLayout
from tsd.codec.const import MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.codec.rollup import RollupSpan, rollup_base_time
from tsd.errors import TableNotFound
from tsd.storage.base import ScanSpec, Storage

__all__ = ["HOUR_ROWS", "RetainedInterval", "Retention", "first_kept", "row_spans"]

#: the data table's rows: an hour each (the interval does not bound rows)
HOUR_ROWS = RollupSpan("h", 1, 1)


class RetainedInterval(Protocol):
    """What retention reads of a configured rollup interval
    (tsd.protocol.rollup_config.RollupInterval; write/ does not import protocol/)."""

    @property
    def table(self) -> str: ...
    @property
    def pre_aggregation_table(self) -> str: ...
    @property
    def default_interval(self) -> bool: ...
    @property
    def span(self) -> RollupSpan: ...


def row_spans(
    data_table: str, intervals: Iterable[RetainedInterval] = ()
) -> dict[str, tuple[RollupSpan, ...]]:
    """Every table holding time series rows -> the spans its rows may have: the data table
    an hour; each interval's rollup and pre-aggregate tables its row span, and the default
    interval's also an hour (/api/rollup stores raw pre-aggregates in hour rows)."""
    spans: dict[str, list[RollupSpan]] = {data_table: [HOUR_ROWS]}
    for interval in intervals:
        for table in (interval.table, interval.pre_aggregation_table):
            found = spans.setdefault(table, [])
            found.append(interval.span)
            if interval.default_interval:
                found.append(HOUR_ROWS)
    return {table: tuple(dict.fromkeys(found)) for table, found in spans.items()}


def first_kept(cutoff_s: int, spans: Iterable[RollupSpan]) -> int:
    """The base time of the first row kept for a cut-off: rows based before it ended at or
    before the cut-off (with several spans, the earliest: no row partly inside goes)."""
    return min(rollup_base_time(cutoff_s, span) for span in spans)


class Retention:
    """Drops the rows of ``tables`` (name -> row spans, :func:`row_spans`) whose span
    ended ``retention_s`` ago or more (0: keeps everything)."""

    def __init__(
        self,
        storage: Storage,
        tables: Mapping[str, tuple[RollupSpan, ...]],
        layout: KeyLayout,
        retention_s: int,
    ) -> None:
        self._storage = storage
        self._tables = dict(tables)
        self._width = layout.salt_width + layout.metric_width
        self.retention_s = retention_s
        #: the cut-off of the last pass, on its hour (the data rows before it are gone)
        self.cutoff_s = 0

    @property
    def tables(self) -> list[str]:
        return list(self._tables)

    def due(self, now: float) -> bool:
        return self.retention_s > 0 and self._cutoff(now) > self.cutoff_s

    def _cutoff(self, now: float) -> int:
        """The cut-off on its hour (every span's rows start on an hour, so each table drops
        the same rows for it as for the exact cut-off)."""
        expired = int(now) - self.retention_s
        return max(0, expired - expired % MAX_TIMESPAN)

    async def apply(self, now: float) -> dict[str, int]:
        """One pass over every table; the entries deleted per table (a table missing from
        storage is skipped)."""
        if self.retention_s <= 0:
            return {}
        cutoff = self._cutoff(now)
        deleted = {}
        for table, spans in self._tables.items():
            stop_time = first_kept(cutoff, spans).to_bytes(TIMESTAMP_BYTES, "big")
            try:
                deleted[table] = await self._drop_before(table, stop_time)
            except TableNotFound:
                continue
        self.cutoff_s = cutoff
        return deleted

    async def _drop_before(self, table: str, stop_time: bytes) -> int:
        deleted = 0
        start = b""
        while True:
            prefix = await self._next_prefix(table, start)
            if prefix is None:
                break
            deleted += await self._storage.delete_range(table, prefix, prefix + stop_time)
            start = _after(prefix)
            if not start:
                break
        return deleted

    async def _next_prefix(self, table: str, start: bytes) -> bytes | None:
        spec = ScanSpec(start=start, limit=1, batch_rows=1)
        async with contextlib.aclosing(self._storage.scan_keys(table, spec)) as batches:
            async for keys in batches:
                if keys:
                    return keys[0][: self._width]
        return None


def _after(prefix: bytes) -> bytes:
    """The smallest key above every key starting with ``prefix`` (b"" when none is)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b""
    return stripped[:-1] + bytes([stripped[-1] + 1])
