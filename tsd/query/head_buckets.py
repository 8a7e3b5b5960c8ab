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

A row-hour is one bucket of such a read (the 1h rollup interval: an hour's ``avg``), and
a closed hour's rows do not change until they are written out: decoding the 4.3 M points
of a 30-day panel's 72,000 head rows at every refresh took most of its time. So each
clean head row's bucket is remembered (:class:`BucketMemo`) by its slot and version in
the head (tsd/head/head.py: a new version whenever the row's points change, or the row
leaves its slot), and a read takes the rows whose version it remembers from there
without their bytes: only the rows that changed since (the open hour, an hour that got
a late point) are decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tsd.codec import KeyLayout
from tsd.codec.const import MAX_TIMESPAN, TIMESTAMP_BYTES
from tsd.codec.rollup import RollupSpan, rollup_base_time, rollup_offset_ms
from tsd.head import HeadRuns, HeadSnapshot
from tsd.query.decode import RowPoints, base_times_s
from tsd.query.downsample import RowBuckets, row_buckets
from tsd.query.rollup import IntervalLike, ReadSource
from tsd.query_spec import DownsampleSpec
from tsd.storage.base import Cell, CellBlock, Row

__all__ = ["BucketMemo", "HeadHours", "rollup_buckets", "without_hours"]

#: the bucket a memo holds per row: the row's hour, whole
_ROW_MS = MAX_TIMESPAN * 1000


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


@dataclass(slots=True, eq=False)
class _Remembered:
    """Per head slot (index): the version its bucket was computed at (-1: none), the
    bucket's time and value, what the row's points count as stored bytes (the query byte
    limit's count, as :func:`tsd.query.head_rows.decode_head_runs` counts them) and its
    series' number (:attr:`BucketMemo._series`)."""

    version: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    stored: npt.NDArray[np.int64]
    series: npt.NDArray[np.int64]

    @classmethod
    def of_size(cls, size: int) -> _Remembered:
        return cls(
            np.full(size, -1, np.int64),
            np.zeros(size, np.int64),
            np.zeros(size, np.float64),
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
        )

    def grown(self, size: int) -> _Remembered:
        grown = _Remembered.of_size(size)
        n = len(self.version)
        for name in ("version", "ts", "value", "stored", "series"):
            getattr(grown, name)[:n] = getattr(self, name)
        return grown


#: bytes a memo keeps per head slot
MEMO_SLOT_BYTES = 40


class BucketMemo:
    """Each clean head row's one bucket (the hour's, see the module docstring), per
    downsample function, by the row's slot and version in one head: valid exactly while
    the slot holds that version, i.e. until the row's points change or the row leaves
    (a new version then; the entry is overwritten by the next read of the slot).

    A read's remembered rows are handed over as one row per series (its buckets in time
    order, under the key of its first row): 72,000 rows of a 30-day panel then cost the
    spans (tsd/query/spans.py) 100 rows, not a sort of 72,000 keys. Series are numbered
    as rows are remembered (their keys without the base time).

    Bounded by the head: :data:`MEMO_SLOT_BYTES` per slot the head ever had (its rows at
    most, which ``tsd.storage.head.max_bytes`` bounds) per downsample function memoized
    (the row functions' codes: three at most; the rollup read memoizes ``avg`` only), and
    the series numbers, dropped with every entry once they outnumber the slots twice.
    Used on the event loop only."""

    def __init__(self, layout: KeyLayout) -> None:
        self._time_at = layout.tags_start - TIMESTAMP_BYTES
        self._by_function: dict[int, _Remembered] = {}
        #: series key (the row key without its base time) -> its number
        self._series: dict[bytes, int] = {}

    @staticmethod
    def applies(buckets: RowBuckets | None) -> bool:
        """Whether a read's buckets are whole rows (one bucket a row-hour)."""
        return buckets is not None and buckets.spec.interval_ms == _ROW_MS

    def recall(
        self, snapshot: HeadSnapshot, buckets: RowBuckets, by_series: bool = True
    ) -> tuple[list[bytes], RowPoints, int] | None:
        """The rows of ``snapshot`` whose bucket is remembered at their version, set
        aside in the snapshot, as one part: keys and points (``row_points`` None: counted
        as the buckets they are, as the rollup read counts them), one row per series
        (``by_series``) or per row read; and the rows they are. None: no such row."""
        memo = self._by_function.get(buckets.function_code)
        if memo is None or not self.applies(buckets):
            return None
        slots = snapshot.slots
        candidates = np.flatnonzero(snapshot.plain_rows() & (slots < len(memo.version)))
        at = slots[candidates]
        known = (memo.version[at] == snapshot.versions[candidates]) & (
            memo.ts[at] >= buckets.seek_ms
        )
        hits, at = candidates[known], at[known]
        if not len(hits):
            return None
        snapshot.set_aside(hits)
        ts, values, stored = memo.ts[at], memo.value[at], int(memo.stored[at].sum())
        if not by_series:
            offsets = np.arange(len(hits) + 1, dtype=np.int64)
            points = RowPoints(offsets, ts, values, None, None, (), stored)
            return snapshot.keys_at(hits), points, len(hits)
        series = memo.series[at]
        order = np.lexsort((ts, series))
        series = series[order]
        starts = np.flatnonzero(np.concatenate(([True], series[1:] != series[:-1])))
        offsets = np.append(starts, len(order)).astype(np.int64)
        points = RowPoints(offsets, ts[order], values[order], None, None, (), stored)
        return snapshot.keys_at(hits[order[starts]]), points, len(hits)

    def remember(self, runs: HeadRuns, buckets: RowBuckets, points: RowPoints) -> None:
        """The buckets of ``runs`` (a snapshot's, :func:`decode_head_runs` with
        ``buckets``: ``points``) kept by slot and version: the rows of one bucket."""
        if runs.slots is None or runs.versions is None or runs.value_lengths is None:
            return
        if not self.applies(buckets) or not runs.keys:
            return
        one = np.flatnonzero(np.diff(points.row_offsets) == 1)
        if not len(one):
            return
        slots = runs.slots[one]
        code = buckets.function_code
        memo = self._by_function.get(code)
        top = int(slots.max()) + 1
        if memo is None:
            memo = _Remembered.of_size(top)
        elif top > len(memo.version):
            memo = memo.grown(max(top, len(memo.version) * 3 // 2))
        self._by_function[code] = memo
        keys = [runs.keys[i] for i in one.tolist()]
        numbers = self._numbers(keys, len(memo.version))
        if numbers is None:  # the series numbers were dropped, and every entry with them
            memo = self._by_function[code]
            numbers = self._numbers(keys, len(memo.version))
            assert numbers is not None
        first = points.row_offsets[one]
        counts = runs.counts[one]
        key_lengths = np.fromiter(map(len, keys), np.int64, len(keys))
        memo.version[slots] = runs.versions[one]
        memo.ts[slots] = points.timestamps[first]
        memo.value[slots] = points.values[first]
        memo.stored[slots] = key_lengths * counts + 2 * counts + runs.value_lengths[one]
        memo.series[slots] = numbers

    def _numbers(self, keys: list[bytes], slots: int) -> npt.NDArray[np.int64] | None:
        """The series number of each row key (new series numbered on); None when the
        numbers outgrew twice the ``slots`` and were dropped with every entry."""
        at = self._time_at
        table = self._series
        numbers = np.fromiter(
            (table.setdefault(k[:at] + k[at + TIMESTAMP_BYTES :], len(table)) for k in keys),
            np.int64,
            len(keys),
        )
        if len(table) > 2 * slots + len(keys):
            table.clear()
            self._by_function = {
                code: _Remembered.of_size(len(memo.version))
                for code, memo in self._by_function.items()
            }
            return None
        return numbers
