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
from tsd.codec.const import MAX_TIMESPAN
from tsd.codec.rollup import RollupSpan, rollup_base_time, rollup_offset_ms, rollup_row_key
from tsd.query.decode import base_times_s
from tsd.query.downsample import RowBuckets, row_buckets
from tsd.query.rollup import IntervalLike, ReadSource
from tsd.query_spec import DownsampleSpec
from tsd.storage.base import Cell, CellBlock, Row

__all__ = ["head_hours", "rollup_buckets", "without_hours"]


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


def head_hours(
    layout: KeyLayout, keys: Sequence[bytes], interval: IntervalLike
) -> dict[bytes, set[int]]:
    """The row-hours of data row ``keys`` (base times, seconds) by the key of the rollup
    row holding their rollup cells."""
    span = interval.span
    out: dict[bytes, set[int]] = {}
    rollup_base: dict[int, int] = {}
    for key, base in zip(keys, base_times_s(layout, list(keys)).tolist(), strict=True):
        at = rollup_base.get(base)
        if at is None:
            at = rollup_base[base] = rollup_base_time(base, span)
        out.setdefault(rollup_row_key(key, at, layout.tags_start), set()).add(base)
    return out


def without_hours(
    block: CellBlock, hours: dict[bytes, set[int]], layout: KeyLayout, interval: IntervalLike
) -> CellBlock:
    """Stored rollup rows without their cells of the row-hours in ``hours``."""
    rows = []
    bases = base_times_s(layout, block.keys).tolist()
    span = interval.span
    for row, base in zip(block, bases, strict=True):
        dropped = hours.get(row.key)
        if dropped is None:
            rows.append(row)
            continue
        kept = tuple(c for c in row.cells if not _in_hours(c, base, span, dropped))
        rows.append(Row(row.key, kept))
    return CellBlock.from_rows(rows, block.wire_bytes)


def _in_hours(cell: Cell, base: int, span: RollupSpan, hours: set[int]) -> bool:
    if len(cell.qualifier) != 3:  # not one rollup interval's cell: kept as is
        return False
    at = base + rollup_offset_ms(cell.qualifier, span) // 1000
    return at - at % MAX_TIMESPAN in hours
