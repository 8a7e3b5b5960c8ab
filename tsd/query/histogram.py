"""Histogram queries: ``percentiles`` over stored histogram points. Pure.

Theory of operation (OpenTSDB 2.4.1 src/core/TsdbQuery.java HistogramGroupByAndAggregateCB,
HistogramSpanGroup, HistogramAggregationIterator, HistogramDownsampler,
HistogramDataPointsToDataPointsAdaptor, SimpleHistogram.percentile):

* The sub-query's rows are read as for any query; only their histogram cells (``06``
  qualifiers) count. :func:`decode_histogram_rows` gives each point a value that is the
  index of its decoded histogram, so that series, filters and groups are found by the
  engine's usual machinery.
* Each group's histograms are summed (bucket counts, underflow, overflow), per timestamp,
  or per downsample interval (the interval's start as its timestamp); the group's
  aggregator is ignored (only ``none`` keeps each series apart).
* Each percentile ``p`` gives one output series, ``<metric>_pct_<p as a Java float>``:
  at each timestamp the middle of the first bucket whose running share of the counts
  reaches ``p`` percent (computed in float32 as OpenTSDB does), -1 for ``p`` outside
  [1, 100], 0 when no bucket reaches it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from tsd.codec import KeyLayout
from tsd.codec.const import HISTOGRAM_PREFIX, TIMESTAMP_BYTES
from tsd.codec.histogram import HistogramError, SimpleHistogram, decode_simple_histogram
from tsd.java_text import java_float_to_string
from tsd.query.decode import RowPoints
from tsd.query.series import AggregatedSeries, SeriesBatch
from tsd.query_spec import DownsampleSpec
from tsd.storage.base import CellBlock

__all__ = [
    "decode_histogram_rows",
    "histogram_series",
    "percentile",
]

_F4 = struct.Struct(">f")


def decode_histogram_rows(
    block: CellBlock, layout: KeyLayout, histograms: list[SimpleHistogram] | None
) -> RowPoints:
    """The histogram points of ``block``'s rows; each value is the index in ``histograms``
    (appended to) of the point's histogram. Undecodable cells are skipped (OpenTSDB logs
    them and goes on). ``histograms`` None: rows of a rollup table, which hold none."""
    at = layout.tags_start - TIMESTAMP_BYTES
    offsets = [0]
    timestamps: list[int] = []
    values: list[float] = []
    stored = 0
    for row in block:
        base_ms = int.from_bytes(row.key[at : at + TIMESTAMP_BYTES], "big") * 1000
        found: dict[int, int] = {}
        for cell in row.cells:
            q = cell.qualifier
            stored += len(row.key) + len(q) + len(cell.value)
            if histograms is None or not q or q[0] != HISTOGRAM_PREFIX or len(q) not in (3, 5):
                continue
            if not cell.value:
                continue
            offset = int.from_bytes(q[1:], "big")
            ts = base_ms + (offset * 1000 if len(q) == 3 else offset)
            try:
                histogram = decode_simple_histogram(cell.value, True, cell.value[0])
            except HistogramError:
                continue
            found[ts] = len(histograms)
            histograms.append(histogram)
        for ts in sorted(found):
            timestamps.append(ts)
            values.append(float(found[ts]))
        offsets.append(len(timestamps))
    return RowPoints(
        np.array(offsets, dtype=np.int64),
        np.array(timestamps, dtype=np.int64),
        np.array(values, dtype=np.float64),
        None,
        None,
        stored_bytes=stored,
    )


def _summed(histograms: Sequence[SimpleHistogram]) -> SimpleHistogram:
    """SimpleHistogram.aggregate(SUM) of the histograms, in order, onto a clone of the
    first."""
    first = histograms[0]
    total = SimpleHistogram(first.codec_id, dict(first.entries), first.underflow, first.overflow)
    for other in histograms[1:]:
        for key, (low, high, count) in other.entries.items():
            old = total.entries.get(key)
            total.entries[key] = (low, high, count + (old[2] if old else 0))
        total.underflow += other.underflow
        total.overflow += other.overflow
    return total


def percentile(histogram: SimpleHistogram, p: float) -> float:
    """SimpleHistogram.percentile: float32 arithmetic for the bucket's middle, Java int
    arithmetic for the counts."""
    if p < 1.0 or p > 100.0:
        return -1.0
    buckets = histogram.ordered()
    total = _int32(sum(_int32(count) for _, _, count in buckets))
    running = 0
    for low, high, count in buckets:
        running += _int32(count)
        area = _java_div(running * 100.0, total)
        if area >= p:
            middle = _f32(_f32(low + high) / 2)
            return middle
    return 0.0


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _f32(value: float) -> float:
    try:
        return float(_F4.unpack(_F4.pack(value))[0])
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _java_div(num: float, den: int) -> float:
    if den == 0:
        if num == 0:
            return float("nan")
        return float("inf") if num > 0 else float("-inf")
    return num / den


def histogram_series(
    batch: SeriesBatch,
    members: Sequence[int],
    histograms: Sequence[SimpleHistogram],
    percentiles: Sequence[float],
    show_buckets: bool,
    downsample: DownsampleSpec | None,
    start_ms: int,
    end_ms: int,
) -> list[tuple[str, AggregatedSeries]]:
    """(metric suffix, series) for the group of series ``members`` over [start_ms, end_ms]:
    one per percentile (``_pct_<p>``), then with ``show_buckets`` one per bucket of the
    group's first histogram (``_UNDERFLOW``, ``_<lower>_<upper>``..., ``_OVERFLOW``; the
    counts as integers, 0 where a histogram lacks the bucket)."""
    by_time: dict[int, list[SimpleHistogram]] = {}
    for s in members:
        timestamps, values = batch.series(s)
        for ts, index in zip(timestamps.tolist(), values.tolist(), strict=True):
            if not start_ms <= ts <= end_ms:
                continue
            if downsample is not None and downsample.interval_ms > 0:
                ts -= ts % downsample.interval_ms
            by_time.setdefault(ts, []).append(histograms[int(index)])
    times = sorted(by_time)
    summed = [_summed(by_time[ts]) for ts in times]
    stamps = np.array(times, dtype=np.int64)
    out = [
        (
            f"_pct_{java_float_to_string(p)}",
            AggregatedSeries(
                stamps, np.array([percentile(h, p) for h in summed], dtype=np.float64)
            ),
        )
        for p in percentiles
    ]
    if show_buckets and summed:
        columns: list[tuple[str, list[int]]] = [("_UNDERFLOW", [h.underflow for h in summed])]
        for key in sorted(summed[0].entries):
            low, high, _ = summed[0].entries[key]
            name = f"_{java_float_to_string(low)}_{java_float_to_string(high)}"
            columns.append((name, [h.entries[key][2] if key in h.entries else 0 for h in summed]))
        columns.append(("_OVERFLOW", [h.overflow for h in summed]))
        for name, counts in columns:
            ints = np.array(counts, dtype=np.int64)
            out.append(
                (
                    name,
                    AggregatedSeries(
                        stamps, ints.astype(np.float64), ints, np.ones(len(ints), dtype=bool)
                    ),
                )
            )
    return out
