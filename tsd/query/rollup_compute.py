"""Rollups computed by tsd itself (docs/rollups.md): a row-hour's points -> its rollup
cells. Pure (numpy).

OpenTSDB computes no rollups: it stores what an outside job sends to /api/rollup. tsd
computes, for every configured interval but the default one (whose table is the raw data)
and whose length divides an hour, the ``sum``, ``count``, ``min`` and ``max`` columns the
config maps (``aggregationIds``) of each interval of a data row, and encodes them exactly
as /api/rollup stores the same numbers (:func:`tsd.codec.rollup.rollup_qualifier`,
:func:`tsd.codec.rollup.rollup_value_bytes`: an interval whose points are all integers
gets integer cells, any other 8-byte doubles).

The unit is the row-hour: an interval dividing the hour lies in one row, so a row's cells
depend on that row alone and computing them again from the row (a late point merged in) is
all a correction needs. A sum is folded point after point in time order by the
downsampler's own reduction (:func:`tsd.query.downsample.reduce_segments`), so a rollup's
``sum / count`` is the very double a raw ``avg`` of the same bucket gives.

Intervals longer than an hour would need several row-hours per cell; tsd does not compute
them (they stay for an outside job, as on OpenTSDB) and its queries do not read them
transparently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tsd.codec import KeyLayout
from tsd.codec.rollup import rollup_base_time, rollup_qualifier, rollup_row_key, rollup_value_bytes
from tsd.errors import BadRequestError
from tsd.query.decode import RowPoints, base_times_s, decode_rows
from tsd.query.downsample import reduce_segments
from tsd.query.rollup import IntervalLike, RollupConfigLike
from tsd.storage.base import CellBlock

__all__ = ["COMPUTED_AGGREGATORS", "ComputedRollups", "RollupCell"]

#: the columns tsd computes (avg is read as sum over count, as OpenTSDB reads it)
COMPUTED_AGGREGATORS = ("sum", "count", "min", "max")

#: (rollup row key, qualifier, value)
RollupCell = tuple[bytes, bytes, bytes]


@dataclass(frozen=True, slots=True)
class ComputedRollups:
    """The intervals and columns tsd computes for a rollup configuration."""

    intervals: tuple[IntervalLike, ...]
    #: (aggregator, id) of the computed columns the config maps
    columns: tuple[tuple[str, int], ...]
    layout: KeyLayout

    @classmethod
    def from_config(
        cls, config: RollupConfigLike, intervals: Sequence[IntervalLike], layout: KeyLayout
    ) -> ComputedRollups:
        """``intervals``: the config's intervals (all of them; the default one and those
        not dividing an hour are left out here)."""
        columns = []
        for name in COMPUTED_AGGREGATORS:
            try:
                columns.append((name, config.id_for(name)))
            except BadRequestError:  # the config has no column for it
                continue
        kept = tuple(
            i for i in intervals if not i.default_interval and 3600 % i.span.interval_seconds == 0
        )
        return cls(kept, tuple(columns), layout)

    def computes(self, interval: IntervalLike) -> bool:
        return any(i.interval == interval.interval for i in self.intervals)

    def has(self, aggregator: str) -> bool:
        """Whether a read of the ``aggregator`` column (avg: sum and count) finds cells
        tsd computed."""
        names = {name for name, _ in self.columns}
        if aggregator == "avg":
            return {"sum", "count"} <= names
        return aggregator in names

    def tables(self) -> list[str]:
        return list(dict.fromkeys(i.table for i in self.intervals))

    def cells_of_block(
        self, block: CellBlock, *, fix_duplicates: bool, table: str | None = None
    ) -> dict[str, list[RollupCell]]:
        """The rollup cells of whole data rows as stored (raises IllegalDataError for a row
        OpenTSDB could not read)."""
        if not len(block):
            return {}
        points = decode_rows(block, self.layout, fix_duplicates=fix_duplicates)
        return self.cells(block.keys, points, table)

    def cells(
        self, keys: Sequence[bytes], points: RowPoints, table: str | None = None
    ) -> dict[str, list[RollupCell]]:
        """The rollup cells of the data rows ``keys`` (whole rows, decoded as ``points``),
        per table (only ``table``'s when given)."""
        out: dict[str, list[RollupCell]] = {}
        if not len(keys) or not points.point_count or not self.columns:
            return out
        for interval in self.intervals:
            if table is not None and interval.table != table:
                continue
            out.setdefault(interval.table, []).extend(self._interval_cells(keys, points, interval))
        return out

    def _interval_cells(
        self, keys: Sequence[bytes], points: RowPoints, interval: IntervalLike
    ) -> list[RollupCell]:
        span = interval.span
        step = span.interval_seconds
        counts = np.diff(points.row_offsets)
        total = points.point_count
        row_of = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
        bucket = points.timestamps // 1000 // step
        change = np.empty(total, dtype=np.bool_)
        change[0] = True
        np.not_equal(bucket[1:], bucket[:-1], out=change[1:])
        change[points.row_offsets[:-1][counts > 0]] = True
        starts = np.flatnonzero(change)
        lengths = np.diff(np.append(starts, total))
        seg_row = row_of[starts]
        seg_time = bucket[starts] * step
        values = points.values
        sums = reduce_segments(values, starts, total, "sum")
        mins = np.minimum.reduceat(values, starts)
        maxs = np.maximum.reduceat(values, starts)
        if points.is_int is not None and points.int_values is not None:
            all_int = np.logical_and.reduceat(points.is_int, starts)
            ints = points.int_values
            int_sums = np.add.reduceat(ints, starts)
            int_mins = np.minimum.reduceat(ints, starts)
            int_maxs = np.maximum.reduceat(ints, starts)
        else:
            all_int = np.zeros(len(starts), dtype=np.bool_)
            int_sums = int_mins = int_maxs = np.zeros(len(starts), dtype=np.int64)
        columns = {
            "sum": (sums.tolist(), int_sums.tolist()),
            "min": (mins.tolist(), int_mins.tolist()),
            "max": (maxs.tolist(), int_maxs.tolist()),
        }
        # Each data row's rollup row: its key with the row span's base time.
        row_bases = base_times_s(self.layout, list(keys)).tolist()
        base_of: dict[int, int] = {}
        rollup_keys: list[bytes] = []
        rollup_bases: list[int] = []
        for key, base in zip(keys, row_bases, strict=True):
            rbase = base_of.get(base)
            if rbase is None:
                rbase = base_of[base] = rollup_base_time(base, span)
            rollup_keys.append(rollup_row_key(key, rbase, self.layout.tags_start))
            rollup_bases.append(rbase)
        out: list[RollupCell] = []
        is_int = all_int.tolist()
        length_list = lengths.tolist()
        for i, (row, at) in enumerate(zip(seg_row.tolist(), seg_time.tolist(), strict=True)):
            key, rbase = rollup_keys[row], rollup_bases[row]
            for name, agg_id in self.columns:
                number: int | float
                if name == "count":
                    number = length_list[i]
                else:
                    doubles, exact = columns[name]
                    number = exact[i] if is_int[i] else doubles[i]
                flags, value = rollup_value_bytes(number)
                out.append((key, rollup_qualifier(at, rbase, flags, agg_id, span), value))
        return out
