"""Reading stored rollups and pre-aggregates for a downsampled sub-query. Pure.

Theory of operation (OpenTSDB 2.4.1 src/core/TsdbQuery.java transformDownSamplerToRollupQuery,
FallbackRollupOnEmptyResult, getScanStartTimeSeconds/getScanEndTimeSeconds, tableToBeScanned;
src/rollup/RollupQuery.java, RollupSeq.java; src/core/Downsampler.java's rollup cases):

* A sub-query with a downsample interval of N seconds reads the configured rollup interval
  of N seconds, else the largest that divides N; when that is the default interval, or none
  divides N, or ``rollupUsage`` is ROLLUP_RAW, it reads raw data. ``preAggregate`` reads the
  interval's ``preAggregationTable`` instead of its ``table`` (raw: the default interval's).
* The rollup aggregator is the downsample function (zimsum, mimmax, mimmin read sum, max,
  min). Cells whose first qualifier byte is its id are read; ``avg`` reads the ``sum`` and
  ``count`` cells and a bucket's value is the sum of its sums over the sum of its counts;
  ``count`` sums the counts.
* Rows are scanned from the rollup base time of the start (one row earlier with ``rate``)
  to the base time of ``end + interval * intervals`` (the row after the end's, exclusive).
* When the read finds no series: ROLLUP_FALLBACK tries the next smaller dividing interval
  (raw once it reaches the default), ROLLUP_FALLBACK_RAW goes to raw data, ROLLUP_NOFALLBACK
  (and no ``rollupUsage``) answers nothing.

tsd's own rollups (``tsd.rollups.compute``, tsd/query/rollup_compute.py): a sub-query
without ``rollupUsage`` reads them when they give its answer (transparently): a downsample
function they hold a column for (sum, count, min, max, avg and the zim/mim ones), a fixed
interval (not calendar) that a computed interval divides, and for avg a bucket within one
rollup row; it falls back to raw data when they find no series. Anything else reads raw
data. ``rollupUsage`` given keeps OpenTSDB's meaning. The head's rows (not yet written out)
are rolled up as they are read (tsd/query/engine.py).

Where tsd departs: falling back to raw data, OpenTSDB downsamples at the *rollup's*
interval (transformRollupQueryToDownSampler), which answers a ``1d`` query read from ``1h``
rollups with hourly points; tsd keeps the query's downsample, the documented behaviour.
An ``avg`` bucket is summed within one rollup row: a downsample interval longer than the
row span (or not dividing it) averages the rows' averages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from tsd.codec import KeyLayout
from tsd.codec.histogram import SimpleHistogram
from tsd.codec.rollup import RollupSpan, rollup_base_time
from tsd.query.decode import _C, RowPoints, _values, base_times_s
from tsd.query.downsample import reduce_segments
from tsd.query.series import BoolArray, Float64Array, Int64Array
from tsd.query_model import DownsampleSpec, SubQuery
from tsd.storage.base import CellBlock

__all__ = [
    "IntervalLike",
    "RollupConfigLike",
    "RollupRead",
    "decode_rollup_rows",
    "plan_reads",
]

#: downsample functions whose rollup columns are another aggregator's (RollupQuery)
_COLUMN_OF = {"zimsum": "sum", "mimmax": "max", "mimmin": "min"}
#: (row, time) as one sortable integer: rows below 2**21, times in ms below 2**42
_ROW_KEY = 1 << 42
_EMPTY = np.zeros(0, dtype=np.int64)


class IntervalLike(Protocol):
    """What is read of ``tsd.protocol.rollup_config.RollupInterval`` (query/ does not import
    protocol/)."""

    @property
    def table(self) -> str: ...
    @property
    def pre_aggregation_table(self) -> str: ...
    @property
    def interval(self) -> str: ...
    @property
    def default_interval(self) -> bool: ...
    @property
    def span(self) -> RollupSpan: ...


class ComputedLike(Protocol):
    """What is read of ``tsd.query.rollup_compute.ComputedRollups``."""

    def computes(self, interval: IntervalLike) -> bool: ...
    def has(self, aggregator: str) -> bool: ...


class RollupConfigLike(Protocol):
    """What is read of ``tsd.protocol.rollup_config.RollupConfig``."""

    @property
    def default(self) -> IntervalLike: ...
    def best_matches(self, seconds: int) -> Sequence[IntervalLike]: ...
    def id_for(self, aggregator: str | None) -> int: ...


@dataclass(frozen=True, slots=True)
class RollupRead:
    """One read of a sub-query: a table and, for rollups, the interval and its columns."""

    table: str
    #: the RollupInterval read (None: data cells, the raw layout)
    interval: IntervalLike | None = None
    #: the rollup aggregator (the downsample function's column)
    aggregator: str = ""
    #: the first qualifier byte of the cells read (avg: sum's), and count's for avg
    agg_id: int = -1
    count_id: int = -1
    #: the query's downsample interval (``avg`` sums per bucket of it)
    bucket_ms: int = 0
    #: a histogram query (tsd/query/histogram.py): the decoded histograms of the read, which
    #: the points' values index
    histograms: list[SimpleHistogram] | None = None

    @property
    def is_rollup(self) -> bool:
        return self.interval is not None

    @property
    def name(self) -> str:
        """OpenTSDB's ``rollupTable`` echo: the interval read, or ``raw``."""
        return self.interval.interval if self.interval is not None else "raw"

    def scan_window_s(self, start_ms: int, end_ms: int, rate: bool) -> tuple[int, int]:
        """(first row's base time, exclusive end) in seconds of a rollup read."""
        assert self.interval is not None
        span = self.interval.span
        start = start_ms // 1000
        base = rollup_base_time(start, span)
        if rate:
            base = rollup_base_time(base - 1, span)
        end = end_ms // 1000
        return base, rollup_base_time(end + span.interval_seconds * span.intervals, span)

    def engine_spec(self, spec: DownsampleSpec) -> DownsampleSpec:
        """The downsample the engine runs over the points this read yields: a rollup's
        ``count`` buckets sum their counts; ``avg`` buckets arrive as one value each."""
        if self.is_rollup and self.aggregator == "count":
            return replace(spec, function="sum")
        return spec


def plan_reads(
    config: RollupConfigLike | None,
    sub: SubQuery,
    data_table: str,
    computed: ComputedLike | None = None,
) -> list[RollupRead]:
    """The reads of ``sub`` in the order OpenTSDB tries them (at least one); ``computed``:
    the rollups tsd computes (read transparently, see the module docstring). A histogram
    query (``percentiles``) reads once, where a downsampled query would first read: when
    that is a rollup table it finds no histograms there (OpenTSDB decodes histogram cells
    of raw rows only, and does not fall back for histogram queries)."""
    if computed is not None and sub.rollup_usage is None and config is not None:
        reads = _transparent(config, computed, sub, data_table)
    else:
        reads = _plan(config, sub, data_table)
    if sub.is_histogram_query:
        return [replace(reads[0], histograms=[])]
    return reads


def _plan(config: RollupConfigLike | None, sub: SubQuery, data_table: str) -> list[RollupRead]:
    raw_table = data_table
    if sub.pre_aggregate and config is not None:
        raw_table = config.default.pre_aggregation_table
    raw = RollupRead(raw_table)
    spec = sub.downsample_spec
    if (
        config is None
        or spec is None
        or spec.interval_ms <= 0
        or spec.run_all
        or sub.rollup_usage == "ROLLUP_RAW"
    ):
        return [raw]
    matches = list(config.best_matches(spec.interval_ms // 1000))
    if not matches or matches[0].default_interval:
        return [raw]
    aggregator = _COLUMN_OF.get(spec.function, spec.function)
    bucket = spec.interval_ms
    reads = [_rollup_read(config, matches[0], aggregator, sub.pre_aggregate, bucket)]
    if sub.rollup_usage == "ROLLUP_FALLBACK":
        for interval in matches[1:]:
            if interval.default_interval:
                reads.append(raw)
                break
            reads.append(_rollup_read(config, interval, aggregator, sub.pre_aggregate, bucket))
    elif sub.rollup_usage == "ROLLUP_FALLBACK_RAW":
        reads.append(raw)
    return reads


def _transparent(
    config: RollupConfigLike, computed: ComputedLike, sub: SubQuery, data_table: str
) -> list[RollupRead]:
    """Without ``rollupUsage``: tsd's own rollups when they give the answer, then raw."""
    raw = RollupRead(data_table)
    spec = sub.downsample_spec
    if (
        spec is None
        or spec.interval_ms <= 0
        or spec.interval_ms % 1000
        or spec.run_all
        or spec.use_calendar
        or sub.pre_aggregate
        or sub.is_histogram_query
    ):
        return [raw]
    aggregator = _COLUMN_OF.get(spec.function, spec.function)
    if not computed.has(aggregator):
        return [raw]
    bucket_s = spec.interval_ms // 1000
    for interval in config.best_matches(bucket_s):
        if interval.default_interval or not computed.computes(interval):
            continue
        if aggregator == "avg" and _row_seconds(interval.span) % bucket_s:
            continue  # an avg bucket across rollup rows: not summed across them
        return [_rollup_read(config, interval, aggregator, False, spec.interval_ms), raw]
    return [raw]


def _row_seconds(span: RollupSpan) -> int:
    """A length every row of ``span`` is a whole number of (months and years: a day)."""
    if span.units in ("h", "d"):
        return span.intervals * span.interval_seconds
    return 86400


def _rollup_read(
    config: RollupConfigLike, interval: IntervalLike, aggregator: str, pre_agg: bool, bucket: int
) -> RollupRead:
    """Raises BadRequestError "No ID found mapping to aggregator: ..." when the config has
    no column for the function (SaltScanner's getIdForAggregator)."""
    table = interval.pre_aggregation_table if pre_agg else interval.table
    if aggregator == "avg":
        sum_id, count_id = config.id_for("sum"), config.id_for("count")
        return RollupRead(table, interval, aggregator, sum_id, count_id, bucket)
    return RollupRead(table, interval, aggregator, config.id_for(aggregator), bucket_ms=bucket)


def decode_rollup_rows(
    block: CellBlock, layout: KeyLayout, read: RollupRead
) -> tuple[list[bytes], RowPoints]:
    """The rows of ``block`` holding a cell of the columns ``read`` reads (OpenTSDB's scan
    filters cells by their first qualifier byte, so a row without one is never seen) and
    their points (see the module docstring), row by row in time order.

    The cells read are those whose value length is their flags' (a later cell of one
    interval replaces an earlier one, as a later put does), found in one walk by the C
    helper (or by numpy over the block's cells without it); ``avg`` sums the sums and the
    counts of each downsample bucket (in time order, as the downsampler folds) and divides
    (0 when the counts are 0)."""
    assert read.interval is not None
    step_ms = read.interval.span.interval_seconds * 1000
    rows, is_count, intervals, doubles, ints, is_int = _cells_read(block, read)
    # the rows read, numbered 0.. in block order
    present = np.zeros(len(block), dtype=np.bool_)
    present[rows] = True
    kept = np.flatnonzero(present)
    keys = block.keys
    stored = block.stored_bytes if len(block) else 0
    if len(kept) != len(block):
        keys = [block.keys[i] for i in kept.tolist()]
        stored = block.take(kept).stored_bytes
        rows = (np.cumsum(present) - 1)[rows]
    rows_n = len(kept)
    base_ms = base_times_s(layout, keys) * 1000 if rows_n else _EMPTY
    ts = base_ms[rows] + intervals * step_ms
    key = rows * _ROW_KEY + ts  # (row, time) as one sortable integer
    main = _last_per_time(~is_count, key)
    if read.aggregator == "avg":
        counted = _last_per_time(is_count, key)
        points = _averaged(
            rows, ts, key, doubles, main, counted, read.bucket_ms, step_ms, rows_n, stored
        )
        return keys, points
    rows, ts, doubles = rows[main], ts[main], doubles[main]
    offsets = np.zeros(rows_n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=rows_n), out=offsets[1:])
    exact = None
    if ints is not None and is_int is not None and is_int[main].any():
        exact, is_int = ints[main], is_int[main]
    points = RowPoints(
        offsets, ts, doubles, exact, is_int if exact is not None else None, stored_bytes=stored
    )
    return keys, points


def _cells_read(
    block: CellBlock, read: RollupRead
) -> tuple[Int64Array, BoolArray, Int64Array, Float64Array, Int64Array | None, BoolArray | None]:
    """(row, is a count cell, interval index, value as a double, exact integer, is an
    integer) of every cell ``read`` takes, in cell order."""
    if _C is not None and hasattr(_C, "rollup_cells"):
        found = _C.rollup_cells(
            block.qualifiers,
            block.values,
            np.ascontiguousarray(block.qualifier_lengths, np.int64),
            np.ascontiguousarray(block.value_lengths, np.int64),
            np.ascontiguousarray(block.counts, np.int64),
            read.agg_id,
            read.count_id,
        )
        r, c, n, d, i, b = found
        return (
            np.frombuffer(r, np.int64),
            np.frombuffer(c, np.bool_),
            np.frombuffer(n, np.int64),
            np.frombuffer(d, np.float64),
            np.frombuffer(i, np.int64),
            np.frombuffer(b, np.bool_),
        )
    return _cells_read_numpy(block, read)


def _cells_read_numpy(
    block: CellBlock, read: RollupRead
) -> tuple[Int64Array, BoolArray, Int64Array, Float64Array, Int64Array | None, BoolArray | None]:
    """:func:`_cells_read` with numpy (no C helper)."""
    ql, vl = block.qualifier_lengths, block.value_lengths
    q_start = np.cumsum(ql) - ql
    three = np.flatnonzero(ql == 3)
    qb = np.frombuffer(block.qualifiers, np.uint8)
    first = qb[q_start[three]]
    hit = first == read.agg_id
    if read.count_id >= 0:
        hit |= first == read.count_id
    cells = three[hit]
    q_at = q_start[cells]
    packed = qb[q_at + 1].astype(np.int64) << 8 | qb[q_at + 2]
    flags = packed & 0xF
    length = vl[cells]
    ok = (length == (flags & 0x7) + 1) & (((flags & 0x8) == 0) | (length == 4) | (length == 8))
    cells, q_at, packed, flags = cells[ok], q_at[ok], packed[ok], flags[ok]
    rows = np.searchsorted(np.cumsum(block.counts), cells, side="right")
    v_start = (np.cumsum(vl) - vl)[cells]
    buffer = np.frombuffer(block.values + bytes(8), np.uint8)
    doubles, ints, is_int = _values(buffer, v_start, flags)
    return rows, qb[q_at] != read.agg_id, packed >> 4, doubles, ints, is_int


def _last_per_time(mask: BoolArray, key: Int64Array) -> Int64Array:
    """Indices of the cells of ``mask`` ordered by (row, time) (``key``), the last cell of
    each (row, time) only."""
    picked = np.flatnonzero(mask)
    if len(picked) < 2:
        return picked
    key = key[picked]
    if bool((key[1:] > key[:-1]).all()):
        return picked  # the usual rows: cells in qualifier order, one per interval
    order = np.argsort(key, kind="stable")
    key = key[order]
    last = np.ones(len(order), dtype=np.bool_)
    last[:-1] = key[1:] != key[:-1]
    return picked[order[last]]


def _averaged(
    rows: Int64Array,
    ts: Int64Array,
    key: Int64Array,
    doubles: Float64Array,
    sums: Int64Array,
    counts: Int64Array,
    bucket_ms: int,
    step_ms: int,
    rows_n: int,
    stored: int,
) -> RowPoints:
    """One point per row and downsample bucket, at its first rollup's time: the bucket's
    sums over its counts, for the intervals that have both. The usual read (every sum with
    its count, in the same order; buckets of one interval) takes no search and no fold."""
    key_sum, key_count = key[sums], key[counts]
    if len(key_sum) == len(key_count) and np.array_equal(key_sum, key_count):
        matched = counts
    else:
        at = np.searchsorted(key_count, key_sum)
        found = at < len(key_count)
        found[found] = key_count[at[found]] == key_sum[found]
        sums, matched = sums[found], counts[at[found]]
    r, t = rows[sums], ts[sums]
    n = len(t)
    if bucket_ms == step_ms:  # every interval its own bucket
        starts = np.arange(n, dtype=np.int64)
        totals, weights = doubles[sums], doubles[matched]
    else:
        bucket = t - t % bucket_ms if bucket_ms > 0 else np.zeros(n, np.int64)
        change = np.ones(n, dtype=np.bool_)
        if n:
            change[1:] = (r[1:] != r[:-1]) | (bucket[1:] != bucket[:-1])
        starts = np.flatnonzero(change)
        totals = reduce_segments(doubles[sums], starts, n, "sum")
        weights = reduce_segments(doubles[matched], starts, n, "sum")
    nonzero = weights != 0
    values = np.zeros(len(starts), dtype=np.float64)
    np.divide(totals, weights, out=values, where=nonzero)
    offsets = np.zeros(rows_n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r[starts], minlength=rows_n), out=offsets[1:])
    return RowPoints(offsets, t[starts], values, None, None, stored_bytes=stored)
