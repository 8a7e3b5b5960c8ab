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
from tsd.query_spec import DownsampleSpec, SubQuery
from tsd.storage.base import CellBlock

__all__ = [
    "IntervalLike",
    "RollupConfigLike",
    "ReadSource",
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
class ReadSource:
    """What one read of a sub-query reads: a table (the data table for raw points) and, for
    rollups, the interval and its columns; for histograms, the decoded histograms."""

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
) -> list[ReadSource]:
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


def _plan(config: RollupConfigLike | None, sub: SubQuery, data_table: str) -> list[ReadSource]:
    raw_table = data_table
    if sub.pre_aggregate and config is not None:
        raw_table = config.default.pre_aggregation_table
    raw = ReadSource(raw_table)
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
) -> list[ReadSource]:
    """Without ``rollupUsage``: tsd's own rollups when they give the answer, then raw."""
    raw = ReadSource(data_table)
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
) -> ReadSource:
    """Raises BadRequestError "No ID found mapping to aggregator: ..." when the config has
    no column for the function (SaltScanner's getIdForAggregator)."""
    table = interval.pre_aggregation_table if pre_agg else interval.table
    if aggregator == "avg":
        sum_id, count_id = config.id_for("sum"), config.id_for("count")
        return ReadSource(table, interval, aggregator, sum_id, count_id, bucket)
    return ReadSource(table, interval, aggregator, config.id_for(aggregator), bucket_ms=bucket)


def decode_rollup_rows(
    block: CellBlock, layout: KeyLayout, read: ReadSource
) -> tuple[list[bytes], RowPoints]:
    """The rows of ``block`` holding a cell of the columns ``read`` reads (OpenTSDB's scan
    filters cells by their first qualifier byte, so a row without one is never seen) and
    their points (see the module docstring), row by row in time order.

    The cells read are those whose value length is their flags' (a later cell of one
    interval replaces an earlier one, as a later put does), found in one walk by the C
    helper (or by numpy over the block's cells without it); ``avg`` sums the sums and the
    counts of each downsample bucket (in time order, as the downsampler folds) and divides
    (0 when the counts are 0). The usual rows (cells in qualifier order, each sum beside its
    count, buckets of one interval) take no sort, search or fold."""
    assert read.interval is not None
    step_ms = read.interval.span.interval_seconds * 1000
    base_ms = base_times_s(layout, block.keys) * 1000 if len(block) else _EMPTY
    taken = _cells_read(block, read, base_ms, step_ms)
    keys, stored, rows_n = block.keys, block.stored_bytes if len(block) else 0, len(block)
    m_rows, c_rows = taken.m_rows, taken.c_rows
    if taken.seen != len(block):  # rows without a cell read are not found
        present = np.zeros(len(block), dtype=np.bool_)
        present[m_rows] = True
        present[c_rows] = True
        kept = np.flatnonzero(present)
        keys = [block.keys[i] for i in kept.tolist()]
        stored = block.take(kept).stored_bytes
        renumber = np.cumsum(present) - 1
        m_rows, c_rows, rows_n = renumber[m_rows], renumber[c_rows], len(kept)
    m_key = m_rows * _ROW_KEY + taken.m_ts  # (row, time) as one sortable integer
    main = None if taken.m_ordered else _last_per_key(m_key)
    if read.aggregator == "avg":
        c_key = c_rows * _ROW_KEY + taken.c_ts
        counted = None if taken.c_ordered else _last_per_key(c_key)
        points = _averaged(
            _Column(m_rows, taken.m_ts, m_key, taken.m_doubles, main),
            _Column(c_rows, taken.c_ts, c_key, taken.c_doubles, counted),
            taken.paired and main is None and counted is None,
            read.bucket_ms,
            step_ms,
            rows_n,
            stored,
        )
        return keys, points
    pick = slice(None) if main is None else main
    rows, ts, doubles = m_rows[pick], taken.m_ts[pick], taken.m_doubles[pick]
    offsets = np.zeros(rows_n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=rows_n), out=offsets[1:])
    exact = is_int = None
    if taken.m_is_int[pick].any():
        exact, is_int = taken.m_ints[pick], taken.m_is_int[pick]
    return keys, RowPoints(offsets, ts, doubles, exact, is_int, stored_bytes=stored)


@dataclass(frozen=True, slots=True)
class _Taken:
    """The cells a read takes: the aggregator's (rows, times, values) and the counts' for
    avg, in cell order; how many rows hold one; whether each kind is in strictly increasing
    (row, time) order, and whether both are of the same (row, time) in the same order."""

    m_rows: Int64Array
    m_ts: Int64Array
    m_doubles: Float64Array
    m_ints: Int64Array
    m_is_int: BoolArray
    c_rows: Int64Array
    c_ts: Int64Array
    c_doubles: Float64Array
    seen: int
    m_ordered: bool
    c_ordered: bool
    paired: bool


@dataclass(frozen=True, slots=True)
class _Column:
    rows: Int64Array
    ts: Int64Array
    key: Int64Array
    doubles: Float64Array
    #: the cells to use, ordered by key (None: all, already so)
    pick: Int64Array | None


def _cells_read(block: CellBlock, read: ReadSource, base_ms: Int64Array, step_ms: int) -> _Taken:
    """The cells ``read`` takes (:class:`_Taken`): the C helper's walk, else numpy."""
    if _C is None or not hasattr(_C, "rollup_cells"):
        return _cells_read_numpy(block, read, base_ms, step_ms)
    (mr, mt, md, mi, mb), (cr, ct, cd), (seen, m_ord, c_ord, paired) = _C.rollup_cells(
        block.qualifiers,
        block.values,
        np.ascontiguousarray(block.qualifier_lengths, np.int64),
        np.ascontiguousarray(block.value_lengths, np.int64),
        np.ascontiguousarray(block.counts, np.int64),
        np.ascontiguousarray(base_ms, np.int64),
        step_ms,
        read.agg_id,
        read.count_id,
    )
    i64, f64 = np.int64, np.float64
    return _Taken(
        np.frombuffer(mr, i64), np.frombuffer(mt, i64), np.frombuffer(md, f64),
        np.frombuffer(mi, i64), np.frombuffer(mb, np.bool_),
        np.frombuffer(cr, i64), np.frombuffer(ct, i64), np.frombuffer(cd, f64),
        seen, bool(m_ord), bool(c_ord), bool(paired),
    )  # fmt: skip


def _cells_read_numpy(
    block: CellBlock, read: ReadSource, base_ms: Int64Array, step_ms: int
) -> _Taken:
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
    ts = base_ms[rows] + (packed >> 4) * step_ms
    v_start = (np.cumsum(vl) - vl)[cells]
    buffer = np.frombuffer(block.values + bytes(8), np.uint8)
    doubles, ints, is_int = _values(buffer, v_start, flags)
    if ints is None or is_int is None:
        ints, is_int = np.zeros(len(cells), np.int64), np.zeros(len(cells), np.bool_)
    main = qb[q_at] == read.agg_id
    count = ~main
    m_key = rows[main] * _ROW_KEY + ts[main]
    c_key = rows[count] * _ROW_KEY + ts[count]
    return _Taken(
        rows[main], ts[main], doubles[main], ints[main], is_int[main],
        rows[count], ts[count], doubles[count],
        len(np.unique(rows)),
        bool((m_key[1:] > m_key[:-1]).all()),
        bool((c_key[1:] > c_key[:-1]).all()),
        bool(np.array_equal(m_key, c_key)),
    )  # fmt: skip


def _last_per_key(key: Int64Array) -> Int64Array:
    """Indices ordered by ``key`` (row, time), the last cell of each key only."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    last = np.ones(len(order), dtype=np.bool_)
    last[:-1] = ordered[1:] != ordered[:-1]
    return order[last]


def _averaged(
    sums: _Column,
    counts: _Column,
    paired: bool,
    bucket_ms: int,
    step_ms: int,
    rows_n: int,
    stored: int,
) -> RowPoints:
    """One point per row and downsample bucket, at its first rollup's time: the bucket's
    sums over its counts, for the intervals that have both."""
    if paired:
        totals, weights = sums.doubles, counts.doubles
        r, t = sums.rows, sums.ts
    else:
        s_pick = np.arange(len(sums.key)) if sums.pick is None else sums.pick
        c_pick = np.arange(len(counts.key)) if counts.pick is None else counts.pick
        key_sum, key_count = sums.key[s_pick], counts.key[c_pick]
        at = np.searchsorted(key_count, key_sum)
        found = at < len(key_count)
        found[found] = key_count[at[found]] == key_sum[found]
        s_pick, c_pick = s_pick[found], c_pick[at[found]]
        totals, weights = sums.doubles[s_pick], counts.doubles[c_pick]
        r, t = sums.rows[s_pick], sums.ts[s_pick]
    n = len(t)
    if bucket_ms == step_ms:  # every interval its own bucket
        first_ts, first_rows = t, r
    else:
        bucket = t - t % bucket_ms if bucket_ms > 0 else np.zeros(n, np.int64)
        change = np.ones(n, dtype=np.bool_)
        if n:
            change[1:] = (r[1:] != r[:-1]) | (bucket[1:] != bucket[:-1])
        starts = np.flatnonzero(change)
        totals = reduce_segments(totals, starts, n, "sum")
        weights = reduce_segments(weights, starts, n, "sum")
        first_ts, first_rows = t[starts], r[starts]
    values = np.zeros(len(first_ts), dtype=np.float64)
    np.divide(totals, weights, out=values, where=weights != 0)
    offsets = np.zeros(rows_n + 1, dtype=np.int64)
    np.cumsum(np.bincount(first_rows, minlength=rows_n), out=offsets[1:])
    return RowPoints(offsets, first_ts, values, None, None, stored_bytes=stored)
