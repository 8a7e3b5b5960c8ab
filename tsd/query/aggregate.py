"""Cross-series aggregation and the per-group pipeline. Pure (numpy).

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.1-3.2; OpenTSDB
src/core/SpanGroup.java ``iterator``, AggregationIterator.java): a group's series are
lined up by interpolate.py, and at every emitted timestamp the group's aggregator folds
the contributing values in series order — on the long path when the timestamp is
all-integer (raw, not downsampled, not rate), else on the double path (reducers.py). A
double result that is infinite fails the query, as OpenTSDB's does.

``aggregate_group`` runs one group (OpenTSDB's SpanGroup) end to end in OpenTSDB's order:
per series downsample, then rate, then aggregation across series. Its ``start_ms`` /
``end_ms`` are the aggregation window (the scan window; OpenTSDB passes the scan start
and end to the SpanGroup), the query bounds only matter to ``0all``; trim the result to
the query with ``AggregatedSeries.trim``. The ``none`` aggregator is the same pipeline on
a single-series group.
"""

from __future__ import annotations

from typing import Required, TypedDict, Unpack

import numpy as np

from tsd.errors import TsdError
from tsd.query.downsample import downsample
from tsd.query.interpolate import align, align_common, common_timestamps, emission_times
from tsd.query.rate import rate as rate_of
from tsd.query.reducers import AGGREGATORS, run_double, run_long
from tsd.query.series import AggregatedSeries, JoinedSeries, SeriesBatch
from tsd.query_spec import DownsampleSpec, RateOptions

#: OpenTSDB's Const.SECOND_MASK: a timestamp with any of these bits set is in ms.
_SECOND_MASK = 0xFFFFFFFF00000000
_MAX_TIMESPAN_S = 3600


class Pipeline(TypedDict, total=False):
    """A group's way through the kernels: the aggregation window (the scan window), the
    query's bounds (``0all``), the downsample and the rate (``aggregate_group``)."""

    start_ms: Required[int]
    end_ms: Required[int]
    query_start_ms: Required[int]
    query_end_ms: Required[int]
    downsample_spec: DownsampleSpec | None
    rate: bool
    rate_options: RateOptions | None


class InfiniteValueError(TsdError):
    """An aggregated value was infinite (OpenTSDB: IllegalStateException "Got Infinity")."""


def aggregate_series(
    batch: SeriesBatch,
    aggregator: str,
    *,
    start_ms: int,
    end_ms: int,
    rate: bool = False,
) -> AggregatedSeries:
    """Aggregate all series of ``batch`` into one, as OpenTSDB's AggregationIterator.

    Points before ``start_ms`` are ignored; timestamps after ``end_ms`` are not emitted.
    ``rate`` says the batch holds rates (from ``rate()``), which changes how missing
    values are filled (see interpolate.py). Raises KeyError for an unknown aggregator.
    """
    agg = AGGREGATORS[aggregator]
    if batch.point_count and batch.timestamps.min() < start_ms:
        batch = batch.select_points(batch.timestamps >= start_ms)
    common = common_timestamps(batch)
    if common is not None:
        times, blocks = align_common(batch, common, end_ms, rate)
    else:
        times = emission_times(batch, end_ms, rate)
        blocks = align(batch, times, agg.interpolation, rate)
    n = len(times)
    values = np.empty(n, dtype=np.float64)
    int_values = np.zeros(n, dtype=np.int64) if batch.has_integers and not rate else None
    is_int = np.zeros(n, dtype=np.bool_)
    pos = 0
    for block in blocks:
        width = len(block.timestamps)
        cols = slice(pos, pos + width)
        ints = block.is_int_column
        floats = ~ints
        if not ints.any():
            values[cols] = run_double(aggregator, block.values, block.contributing)
        elif floats.any():
            values[cols][floats] = run_double(
                aggregator, block.values[:, floats], block.contributing[:, floats]
            )
        if ints.any() and block.int_values is not None and int_values is not None:
            longs = run_long(aggregator, block.int_values[:, ints], block.contributing[:, ints])
            int_values[cols][ints] = longs
            values[cols][ints] = longs.astype(np.float64)
            is_int[cols] = ints
        pos += width
    infinite = np.isinf(values) & ~is_int
    if infinite.any():
        at = int(np.flatnonzero(infinite)[0])
        raise InfiniteValueError(f"Got Infinity: {values[at]} at timestamp {int(times[at])}")
    if int_values is None or not is_int.any():
        return AggregatedSeries(times, values)
    return AggregatedSeries(times, values, int_values, is_int)


def aggregate_each(
    batch: SeriesBatch,
    aggregator: str,
    trim: tuple[int, int] | None = None,
    **pipeline: Unpack[Pipeline],
) -> list[AggregatedSeries]:
    """:func:`aggregate_each_joined`'s series, each as its own."""
    return aggregate_each_joined(batch, aggregator, trim, **pipeline).split()


def aggregate_each_joined(
    batch: SeriesBatch,
    aggregator: str,
    trim: tuple[int, int] | None = None,
    **pipeline: Unpack[Pipeline],
) -> JoinedSeries:
    """:func:`aggregate_group` of every series of ``batch`` alone (each trimmed to
    ``trim``, ``AggregatedSeries.trim``'s bounds, when given) (a group-by on a tag
    every series has its own value of, or ``none``), without a Python step per series:
    one series lines up with itself (nothing is interpolated), so the aggregator folds one
    value per emitted timestamp and runs once over all of them as one row of a block."""
    batch = _prepared(batch, **pipeline)
    start_ms, end_ms, rate = pipeline["start_ms"], pipeline["end_ms"], pipeline.get("rate", False)
    if batch.point_count and batch.timestamps.min() < start_ms:
        batch = batch.select_points(batch.timestamps >= start_ms)
    ids = batch.series_ids()
    first = np.zeros(batch.point_count, dtype=np.bool_)
    first[batch.offsets[:-1][batch.lengths > 0]] = True
    emitted = batch.timestamps <= end_ms
    if rate:  # align_common: a rate series' first point is never emitted
        emitted &= ~first
    times = batch.timestamps[emitted]
    row = batch.values[emitted][np.newaxis, :]
    values = run_double(aggregator, row, np.ones(row.shape, dtype=np.bool_))
    is_int = np.zeros(len(times), dtype=np.bool_)
    int_values = None
    if batch.is_int is not None and batch.int_values is not None and not rate:
        # _common_blocks: a column is a double when its point or the series' next is one
        floats = ~batch.is_int
        floats[:-1] |= floats[1:] & ~first[1:]
        ints = ~floats[emitted]
        if ints.any():
            int_values = np.zeros(len(times), dtype=np.int64)
            longs = run_long(
                aggregator,
                batch.int_values[emitted][ints][np.newaxis, :],
                np.ones((1, int(ints.sum())), dtype=np.bool_),
            )
            int_values[ints] = longs
            values[ints] = longs.astype(np.float64)
            is_int = ints
    infinite = np.isinf(values) & ~is_int
    if infinite.any():
        at = int(np.flatnonzero(infinite)[0])
        raise InfiniteValueError(f"Got Infinity: {values[at]} at timestamp {int(times[at])}")
    kept = ids[emitted]
    if trim is not None:
        inside = (times >= trim[0]) & (times <= trim[1])
        times, values, is_int, kept = times[inside], values[inside], is_int[inside], kept[inside]
        int_values = None if int_values is None else int_values[inside]
    offsets = np.zeros(batch.series_count + 1, dtype=np.int64)
    np.cumsum(np.bincount(kept, minlength=batch.series_count), out=offsets[1:])
    if int_values is not None and is_int.any():
        return JoinedSeries(AggregatedSeries(times, values, int_values, is_int), offsets)
    return JoinedSeries(AggregatedSeries(times, values), offsets)


def _prepared(
    batch: SeriesBatch,
    *,
    start_ms: int,
    end_ms: int,
    query_start_ms: int,
    query_end_ms: int,
    downsample_spec: DownsampleSpec | None = None,
    rate: bool = False,
    rate_options: RateOptions | None = None,
) -> SeriesBatch:
    """Per series, OpenTSDB's order before the aggregation: downsample -> rate."""
    if downsample_spec is not None:
        batch = downsample(
            batch,
            downsample_spec,
            start_ms=start_ms,
            end_ms=end_ms,
            query_start_ms=query_start_ms,
            query_end_ms=query_end_ms,
        )
    elif rate and batch.point_count and batch.timestamps.min() < start_ms:
        # The span iterator's seek: nothing before the window reaches the rate (without a
        # rate, aggregate_series seeks the same way).
        batch = batch.select_points(batch.timestamps >= start_ms)
    if rate:
        batch = rate_of(batch, rate_options or RateOptions())
    return batch


def aggregate_group(
    batch: SeriesBatch, aggregator: str, **pipeline: Unpack[Pipeline]
) -> AggregatedSeries:
    """One group, OpenTSDB's order: downsample -> rate -> aggregate (untrimmed)."""
    batch = _prepared(batch, **pipeline)
    return aggregate_series(
        batch,
        aggregator,
        start_ms=pipeline["start_ms"],
        end_ms=pipeline["end_ms"],
        rate=pipeline.get("rate", False),
    )
