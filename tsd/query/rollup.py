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

import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from tsd.codec import KeyLayout
from tsd.codec.const import TIMESTAMP_BYTES
from tsd.codec.histogram import SimpleHistogram
from tsd.codec.rollup import RollupSpan, rollup_base_time
from tsd.query.decode import RowPoints
from tsd.query_model import DownsampleSpec, SubQuery
from tsd.storage.base import CellBlock

__all__ = [
    "IntervalLike",
    "RollupConfigLike",
    "RollupRead",
    "decode_rollup_rows",
    "plan_reads",
    "rollup_rows",
]

#: downsample functions whose rollup columns are another aggregator's (RollupQuery)
_COLUMN_OF = {"zimsum": "sum", "mimmax": "max", "mimmin": "min"}
_F4 = struct.Struct(">f")
_F8 = struct.Struct(">d")


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
        span = interval.span
        if aggregator == "avg" and (
            span.units not in ("h", "d") or (span.intervals * span.interval_seconds) % bucket_s
        ):
            continue  # an avg bucket across rollup rows: not summed across them
        return [_rollup_read(config, interval, aggregator, False, spec.interval_ms), raw]
    return [raw]


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


def rollup_rows(block: CellBlock, read: RollupRead) -> CellBlock:
    """The rows of ``block`` holding a cell of the columns ``read`` reads (OpenTSDB's scan
    filters cells by their first qualifier byte, so a row without one is never seen)."""
    wanted = {read.agg_id, read.count_id} - {-1}
    keep = [
        i
        for i, row in enumerate(block)
        if any(len(c.qualifier) == 3 and c.qualifier[0] in wanted for c in row.cells)
    ]
    return block if len(keep) == len(block) else block.take(keep)


def _value(data: bytes, flags: int) -> tuple[float, int | None] | None:
    """A cell value as (double, exact int or None); None when its length is not its flags'."""
    length = (flags & 0x7) + 1
    if len(data) != length:
        return None
    if flags & 0x8:
        if length == 4:
            return _F4.unpack(data)[0], None
        if length == 8:
            return _F8.unpack(data)[0], None
        return None
    number = int.from_bytes(data, "big", signed=True)
    return float(number), number


def decode_rollup_rows(block: CellBlock, layout: KeyLayout, read: RollupRead) -> RowPoints:
    """The points of rollup rows for ``read`` (see the module docstring), row by row in
    time order."""
    assert read.interval is not None
    span = read.interval.span
    step_ms = span.interval_seconds * 1000
    at = layout.tags_start - TIMESTAMP_BYTES
    offsets = [0]
    timestamps: list[int] = []
    values: list[float] = []
    ints: list[int] = []
    is_int: list[bool] = []
    stored = 0
    for row in block:
        base_ms = int.from_bytes(row.key[at : at + TIMESTAMP_BYTES], "big") * 1000
        picked: dict[int, tuple[float, int | None]] = {}
        counts: dict[int, float] = {}
        for cell in row.cells:
            q = cell.qualifier
            stored += len(row.key) + len(q) + len(cell.value)
            if len(q) != 3:
                continue
            packed = int.from_bytes(q[1:3], "big")
            decoded = _value(cell.value, packed & 0xF)
            if decoded is None:
                continue
            ts = base_ms + (packed >> 4) * step_ms
            if q[0] == read.agg_id:
                picked[ts] = decoded
            elif q[0] == read.count_id:
                counts[ts] = decoded[0]
        if read.aggregator == "avg":
            picked = _averaged(picked, counts, read.bucket_ms)
        for ts in sorted(picked):
            value, exact = picked[ts]
            timestamps.append(ts)
            values.append(value)
            ints.append(exact if exact is not None else 0)
            is_int.append(exact is not None)
        offsets.append(len(timestamps))
    any_int = any(is_int)
    return RowPoints(
        np.array(offsets, dtype=np.int64),
        np.array(timestamps, dtype=np.int64),
        np.array(values, dtype=np.float64),
        np.array(ints, dtype=np.int64) if any_int else None,
        np.array(is_int, dtype=bool) if any_int else None,
        stored_bytes=stored,
    )


def _averaged(
    sums: dict[int, tuple[float, int | None]], counts: dict[int, float], bucket_ms: int
) -> dict[int, tuple[float, int | None]]:
    """One point per downsample bucket, at its first rollup's time: the bucket's sums over
    its counts (0 when they are 0), for the cells that have both."""
    buckets: dict[int, list[float]] = {}
    for ts in sorted(sums):
        if ts not in counts:
            continue
        key = ts - ts % bucket_ms if bucket_ms > 0 else 0
        acc = buckets.setdefault(key, [ts, 0.0, 0.0])
        acc[1] += sums[ts][0]
        acc[2] += counts[ts]
    return {
        int(first): ((total / count) if count else 0.0, None)
        for first, total, count in buckets.values()
    }
