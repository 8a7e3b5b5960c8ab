"""The head's rows read for a query of tsd's own rollups through the bucket kernels. Pure.

A query that reads tsd's own rollups (tsd/query/rollup.py) finds the rows still in the
head without their rollups: those are computed when a row is written out. Rolling each
head row up on read (its rollup cells built, then decoded again) cost about ten times the
raw read of the same rows. For the usual dashboard query, an ``avg`` whose downsample
interval is the rollup interval (``1h-avg`` read from the ``1h`` rollups), a rollup point
is its bucket's ``sum / count``, and tsd/query/rollup_compute.py folds that sum with the
downsampler's own reduction: the very double the bucket kernels give when they reduce a
data row to its buckets as decoded (tsd/query/downsample.py ``RowBuckets``). So the head's
rows (merged with a stored row of the same key first, as the write-out will merge them)
are decoded straight to those buckets, and any stored rollup cell of a row-hour the head
holds is left out (the head's hour replaces it, as its write-out will).
"""

from __future__ import annotations

from collections.abc import Sequence

from tsd.codec import KeyLayout
from tsd.codec.const import MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.codec.rollup import RollupSpan, rollup_base_time, rollup_offset_ms
from tsd.query.decode import base_times_s
from tsd.query.downsample import RowBuckets, row_buckets
from tsd.query.rollup import IntervalLike, ReadSource
from tsd.query_spec import DownsampleSpec
from tsd.storage.base import Cell, CellBlock, Row

__all__ = ["HeadHours", "rollup_buckets", "without_hours"]


def rollup_buckets(read: ReadSource, start_ms: int) -> RowBuckets | None:
    """The buckets that give ``read``'s points from data rows (None when they would not
    be the rollups' very points: another function, or a bucket not the interval's)."""
    interval = read.interval
    if interval is None or read.aggregator != "avg":
        return None
    step_ms = interval.span.interval_seconds * 1000
    if read.bucket_ms != step_ms:
        return None
    spec = DownsampleSpec(f"{step_ms}ms-avg", step_ms, "avg")
    return row_buckets(spec, start_ms)


class HeadHours:
    """The row-hours of the head's data rows (``keys``), asked per stored rollup row: a
    stored rollup row's cells of an hour the head holds are left out (the head's hour
    replaces them, as its write-out will). Only the hours both the rollup row's span and
    the head's rows span are looked up, and only for the rollup rows a read finds: 30
    days of 100 series are 72,000 head rows, and a rollup key built for each of them on
    every read cost more than reducing their points to buckets, while a dashboard's
    stored rollup rows meet the head in an hour or two (and none when the head holds
    every row: nothing is written out yet)."""

    def __init__(self, layout: KeyLayout, keys: Sequence[bytes], interval: IntervalLike) -> None:
        self._layout = layout
        self._span = interval.span
        self._listed = keys
        #: the keys as a set and their first and last base times: once asked
        self._keys: set[bytes] | None = None
        self._first = self._last = 0

    def __bool__(self) -> bool:
        return bool(self._listed)

    def of(self, rollup_key: bytes) -> set[int]:
        """The base times (s) of the head's rows whose rollup cells rollup row
        ``rollup_key`` holds."""
        if self._keys is None:
            bases = base_times_s(self._layout, list(self._listed))
            self._first, self._last = int(bases.min()), int(bases.max())
            self._keys = set(self._listed)
        layout = self._layout
        at = layout.tags_start - TIMESTAMP_BYTES
        base = int.from_bytes(rollup_key[at : layout.tags_start], "big")
        head, tail = rollup_key[:at], rollup_key[layout.tags_start :]
        found: set[int] = set()
        start = max(base, self._first)
        for hour in range(start - start % MAX_TIMESPAN, self._last + 1, MAX_TIMESPAN):
            if hour < base:
                continue
            if rollup_base_time(hour, self._span) != base:
                break
            if head + hour.to_bytes(TIMESTAMP_BYTES, "big") + tail in self._keys:
                found.add(hour)
        return found


def without_hours(
    block: CellBlock, hours: HeadHours, layout: KeyLayout, interval: IntervalLike
) -> CellBlock:
    """Stored rollup rows without their cells of the row-hours the head holds."""
    if not hours:
        return block
    rows = []
    bases = base_times_s(layout, block.keys).tolist()
    span = interval.span
    changed = False
    for row, base in zip(block, bases, strict=True):
        dropped = hours.of(row.key)
        if not dropped:
            rows.append(row)
            continue
        changed = True
        kept = tuple(c for c in row.cells if not _in_hours(c, base, span, dropped))
        rows.append(Row(row.key, kept))
    return CellBlock.from_rows(rows, block.wire_bytes) if changed else block


def _in_hours(cell: Cell, base: int, span: RollupSpan, hours: set[int]) -> bool:
    if len(cell.qualifier) != 3:  # not one rollup interval's cell: kept as is
        return False
    at = base + rollup_offset_ms(cell.qualifier, span) // 1000
    return at - at % MAX_TIMESPAN in hours
