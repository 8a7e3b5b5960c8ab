"""Per-series downsampling: interval buckets, the downsample aggregator, fill policies.
Pure (numpy).

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.3; OpenTSDB
src/core/Downsampler.java, FillingDownsampler.java, DownsamplingSpecification.java and
the ``seek`` of the aggregation iterator):

1. Seek: points before the first interval boundary at or after ``start_ms`` (the
   aggregation window's start, i.e. the hour-aligned scan start) are dropped, so that
   the first interval is complete.
2. Bucket: fixed intervals are aligned to the Unix epoch (``ts - ts % interval``);
   calendar intervals follow ``calendar.py``, anchored at each series' first point.
3. Reduce: each non-empty bucket becomes one point at the bucket's start whose value is
   the downsample aggregator's *double* path over the bucket's values (OpenTSDB always
   downsamples as doubles, so the result is never an integer).
4. Fill (policy other than ``none``): every interval from the one holding ``start_ms`` up
   to, excluding, the one holding ``end_ms`` is emitted; an empty one gets NaN (``nan``,
   ``null``) or 0.0 (``zero``); ``scalar`` fails as in OpenTSDB's /api/query. Data buckets
   off that grid are dropped.

``0all-<agg>`` is one bucket per series over ``[query_start_ms, query_end_ms)``, stamped
with ``query_start_ms`` (fill policies change nothing there).

Work is vectorised over all points of all series at once: buckets are found with integer
arithmetic, runs of (series, bucket) become segments, and segments of similar length are
reduced together as padded blocks (reducers.py).

Reduced as rows are decoded (:class:`RowBuckets`): with a fixed interval that divides the
hour, no fill and an aggregator whose double path is a running sum or count, no bucket
spans two rows of a series (rows are whole hours, aligned to the epoch as the buckets are),
so each row can be reduced to its buckets on its own, before the rows are gathered into
series: the series then hold their buckets (what :func:`downsample` would give them),
never their points. decode.py does it in C for the usual cells (``_decode.c``
``decode_buckets``) and with :func:`downsample_rows` otherwise (also for the embedded
store's head rows); both answer as :func:`downsample` does on whole series
(tests/query/test_row_buckets.py, tests/head/test_differential.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tsd.errors import TsdError
from tsd.query.calendar import FIXED_UNIT_MS, add_interval, interval_starts, previous_interval
from tsd.query.reducers import run_double
from tsd.query.series import BoolArray, Float64Array, Int64Array, SeriesBatch
from tsd.query_spec import DownsampleSpec, FillPolicy

#: Cells of one padded block; bounds the temporary memory of a reduction.
_MAX_BLOCK_CELLS = 1 << 22
#: A data row's span: every point of a row lies within an hour of its base time.
_ROW_SPAN_MS = 3_600_000
#: Downsample aggregators reduced per row as the rows are decoded (their code in _decode.c).
ROW_FUNCTIONS = {"sum": 0, "zimsum": 0, "pfsum": 0, "avg": 1, "count": 2}


class RowsOutOfHour(Exception):
    """A row holds a point beyond its hour: its buckets may meet the next row's, so the
    rows cannot be reduced one by one (no writer makes such rows; the query reads again
    without :class:`RowBuckets`)."""


@dataclass(frozen=True, slots=True)
class RowBuckets:
    """How a query's rows are reduced to buckets as they are decoded (see the module
    docstring): the spec, the aggregation window's start (the seek) and the function's
    code for the C helper."""

    spec: DownsampleSpec
    start_ms: int

    @property
    def seek_ms(self) -> int:
        return _seek_time(self.spec, self.start_ms)

    @property
    def function_code(self) -> int:
        return ROW_FUNCTIONS[self.spec.function]


def row_buckets(spec: DownsampleSpec | None, start_ms: int) -> RowBuckets | None:
    """The :class:`RowBuckets` of a downsample spec over a window from ``start_ms``; None
    when its buckets must see whole series (calendar, ``0all``, fill, another function, an
    interval that does not divide the hour)."""
    if (
        spec is None
        or spec.run_all
        or spec.use_calendar
        or spec.fill_policy is not FillPolicy.NONE
        or spec.function not in ROW_FUNCTIONS
        or spec.interval_ms <= 0
        or _ROW_SPAN_MS % spec.interval_ms
    ):
        return None
    return RowBuckets(spec, start_ms)


def downsample_rows(
    timestamps: Int64Array,
    values: Float64Array,
    row_offsets: Int64Array,
    base_ms: Int64Array,
    buckets: RowBuckets,
) -> SeriesBatch:
    """Each row's points reduced to its buckets (one series per row), as
    :func:`downsample` reduces whole series. Raises RowsOutOfHour when a point lies
    beyond its row's hour."""
    lengths = np.diff(row_offsets)
    if len(timestamps) and bool((timestamps >= np.repeat(base_ms + _ROW_SPAN_MS, lengths)).any()):
        raise RowsOutOfHour()
    rows = SeriesBatch(timestamps, values, row_offsets)
    end_ms = buckets.start_ms  # only a filling downsample reads the end
    return downsample(
        rows,
        buckets.spec,
        start_ms=buckets.start_ms,
        end_ms=end_ms,
        query_start_ms=buckets.start_ms,
        query_end_ms=end_ms,
    )


def downsample(
    batch: SeriesBatch,
    spec: DownsampleSpec,
    *,
    start_ms: int,
    end_ms: int,
    query_start_ms: int,
    query_end_ms: int,
) -> SeriesBatch:
    """Downsample every series of ``batch`` (see the module docstring).

    ``start_ms`` / ``end_ms`` are the aggregation window (OpenTSDB: the scan start and
    end in ms); ``query_start_ms`` / ``query_end_ms`` the query's own bounds (used by
    ``0all``). Returns a float-only batch with the same series.
    """
    if spec.run_all:
        return _downsample_all(batch, spec.function, query_start_ms, query_end_ms)
    seek = _seek_time(spec, start_ms)
    shared = None if spec.use_calendar else _shared_segments(batch, spec, seek)
    if shared is not None:
        times, seg_values, k = shared
        s_count = batch.series_count
        if spec.fill_policy is FillPolicy.NONE:
            counts = np.full(s_count, k, dtype=np.int64)
            return SeriesBatch(np.tile(times, s_count), seg_values, _offsets(counts))
        seg_times = np.tile(times, s_count)
        seg_series = np.repeat(np.arange(s_count, dtype=np.int64), k)
    else:
        if batch.point_count and batch.timestamps.min() < seek:
            batch = batch.select_points(batch.timestamps >= seek)
        buckets = bucket_starts(batch, spec)
        seg_starts, seg_series = _segments(batch, buckets)
        seg_values = reduce_segments(batch.values, seg_starts, batch.point_count, spec.function)
        seg_times = buckets[seg_starts]
    if spec.fill_policy is FillPolicy.NONE:
        counts = np.bincount(seg_series, minlength=batch.series_count)
        return SeriesBatch(seg_times, seg_values, _offsets(counts))
    grid = expected_buckets(spec, start_ms, end_ms)
    return _fill(batch.series_count, grid, seg_series, seg_times, seg_values, spec.fill_policy)


def _shared_segments(
    batch: SeriesBatch, spec: DownsampleSpec, seek: int
) -> tuple[Int64Array, Float64Array, int] | None:
    """(bucket times of one series, the values of every series' buckets, buckets per
    series): the general path's segments when every series has the same
    timestamps and their fixed-interval buckets all hold the same number of points (a
    regular grid: the usual shape of scraped data); None otherwise. The buckets are worked
    out once, on the first series, and the values reduced as one (buckets x points) matrix
    by the same reduction, so the answer is the general path's value for value."""
    s_count, n = batch.series_count, batch.point_count
    if s_count < 2 or n == 0 or n % s_count:
        return None
    width = n // s_count
    if not bool((batch.lengths == width).all()):
        return None
    grid = batch.timestamps.reshape(s_count, width)
    first = grid[0]
    step = max(1, (1 << 17) // width)  # series compared at a time: about 1 MiB
    if not all(bool((grid[lo : lo + step] == first).all()) for lo in range(0, s_count, step)):
        return None
    lo = int(np.searchsorted(first, seek))  # the seek: earlier points are dropped
    if lo == width:
        return None
    buckets = first[lo:] // spec.interval_ms * spec.interval_ms
    change = np.flatnonzero(buckets[1:] != buckets[:-1]) + 1
    per_bucket = change[0] if len(change) else len(buckets)
    k = len(buckets) // per_bucket
    if k * per_bucket != len(buckets) or not (np.diff(change) == per_bucket).all():
        return None
    if len(change) != k - 1:
        return None
    cells = batch.values.reshape(s_count, width)[:, lo:].reshape(s_count * k, per_bucket)
    values = _reduce_regular(cells, spec.function)
    if values is None:
        return None
    return buckets[::per_bucket], values, k


def _seek_time(spec: DownsampleSpec, start_ms: int) -> int:
    """The first interval boundary at or after ``start_ms`` (ValuesInInterval.seekInterval)."""
    if spec.use_calendar:
        unit, amount = spec.calendar_unit, spec.calendar_amount
        boundary = previous_interval(start_ms, amount, unit, spec.timezone)
        if start_ms > boundary:
            boundary = add_interval(boundary, amount, unit, spec.timezone)
        return boundary
    interval = spec.interval_ms
    shifted = start_ms + interval - 1
    return shifted - shifted % interval


def bucket_starts(batch: SeriesBatch, spec: DownsampleSpec) -> Int64Array:
    """The start of the bucket of every point."""
    ts = batch.timestamps
    if not spec.use_calendar:
        return ts // spec.interval_ms * spec.interval_ms
    unit, amount, tz = spec.calendar_unit, spec.calendar_amount, spec.timezone
    lengths = batch.lengths
    nonempty = np.flatnonzero(lengths > 0)
    firsts = ts[batch.offsets[:-1][nonempty]]
    # Series usually share their first timestamp: one calendar computation per distinct one.
    distinct, which = np.unique(firsts, return_inverse=True)
    distinct_anchors = [previous_interval(int(t), amount, unit, tz) for t in distinct.tolist()]
    anchors = np.zeros(batch.series_count, dtype=np.int64)
    anchors[nonempty] = np.asarray(distinct_anchors, dtype=np.int64)[which]
    point_anchor = np.repeat(anchors, lengths)
    fixed_ms = FIXED_UNIT_MS.get(unit)
    if fixed_ms is not None:
        # ms/s/m/h step by a fixed duration: arithmetic from each series' anchor.
        size = amount * fixed_ms
        return point_anchor + (ts - point_anchor) // size * size
    out = np.empty_like(ts)
    for anchor in np.unique(anchors[nonempty]).tolist():
        mine = point_anchor == anchor
        starts = interval_starts(anchor, amount, unit, tz, int(ts[mine].max()))
        idx = np.searchsorted(starts, ts[mine], side="right") - 1
        out[mine] = starts[idx]
    return out


def expected_buckets(spec: DownsampleSpec, start_ms: int, end_ms: int) -> Int64Array:
    """The interval starts a filling downsampler emits for the window."""
    if not spec.use_calendar:
        interval = spec.interval_ms
        first = start_ms - start_ms % interval
        last = end_ms - end_ms % interval
        return np.arange(first, last, interval, dtype=np.int64)
    unit, amount, tz = spec.calendar_unit, spec.calendar_amount, spec.timezone
    first = previous_interval(start_ms, amount, unit, tz)
    stop = previous_interval(end_ms, amount, unit, tz)
    if stop == first:
        stop = add_interval(stop, amount, unit, tz)
    starts = interval_starts(first, amount, unit, tz, stop)
    return starts[starts < stop]


def _segments(batch: SeriesBatch, buckets: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Start index and series of every run of points sharing (series, bucket)."""
    n = batch.point_count
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    change = np.empty(n, dtype=np.bool_)
    change[0] = True
    np.not_equal(buckets[1:], buckets[:-1], out=change[1:])
    change[batch.offsets[:-1][batch.lengths > 0]] = True
    starts = np.flatnonzero(change)
    per_series = np.diff(np.searchsorted(starts, batch.offsets))
    return starts, np.repeat(np.arange(batch.series_count, dtype=np.int64), per_series)


def reduce_segments(
    values: Float64Array, seg_starts: Int64Array, total: int, function: str
) -> Float64Array:
    """Aggregator ``function`` (double path) over each segment ``values[start:next]``."""
    count = len(seg_starts)
    out = np.empty(count, dtype=np.float64)
    if count == 0:
        return out
    lengths = np.diff(np.append(seg_starts, total))
    max_len = int(lengths.max())
    first = int(seg_starts[0])
    if max_len * count == total - first and bool((lengths == max_len).all()):
        # Regular data: every bucket holds the same number of points; no gather needed.
        grid = values[first:total].reshape(count, max_len)
        fast = _reduce_regular(grid, function)
        if fast is not None:
            return fast
        return run_double(function, grid.T, np.ones((max_len, count), dtype=np.bool_))
    if max_len * count <= 2 * total + count:
        _reduce_block(values, seg_starts, lengths, function, np.arange(count), out)
        return out
    # Very uneven segments: reduce each power-of-two length class on its own.
    classes = np.ceil(np.log2(lengths)).astype(np.int64)
    for cls in np.unique(classes).tolist():
        which = np.flatnonzero(classes == cls)
        _reduce_block(values, seg_starts[which], lengths[which], function, which, out)
    return out


def _reduce_regular(grid: Float64Array, function: str) -> Float64Array | None:
    """The common aggregators over rows of ``grid`` (one bucket per row) without NaN,
    folding column after column as the Java loops do; None when not applicable. Short
    rows are done in slices that stay in the CPU's cache: a column of a whole grid of
    short rows strides across all of its memory, once per column."""
    if function not in _REGULAR:
        return None
    rows, width = grid.shape
    step = _slice_rows(width)
    if any(bool(np.isnan(grid[lo : lo + step]).any()) for lo in range(0, rows, step)):
        return None
    if rows <= step:
        return _reduce_rows(grid, function)
    out = np.empty(rows)
    for lo in range(0, rows, step):
        out[lo : lo + step] = _reduce_rows(grid[lo : lo + step], function)
    return out


def _slice_rows(width: int) -> int:
    """Rows of ``width`` values worked on at a time: about 1 MiB of short rows; wide rows
    (a column is then few values per cache line anyway) all at once."""
    return (1 << 17) // max(width, 1) if width <= 64 else 1 << 62


def _reduce_rows(grid: Float64Array, function: str) -> Float64Array:
    """_reduce_regular of one slice of rows."""
    width = grid.shape[1]
    with np.errstate(all="ignore"):
        if function in ("min", "mimmin", "max", "mimmax"):
            return np.asarray((np.min if "min" in function else np.max)(grid, axis=1))
        if function == "count":
            return np.full(grid.shape[0], float(width))
        if function in ("first", "last"):
            return grid[:, 0 if function == "first" else -1].copy()
        if function == "mult":
            acc = grid[:, 0].copy()
            for j in range(1, width):
                acc *= grid[:, j]
            return acc
        square = function == "squareSum"
        acc = np.zeros(grid.shape[0])
        for j in range(width):
            acc += grid[:, j] * grid[:, j] if square else grid[:, j]
        if function == "avg":
            acc /= width  # in place: the same division, one temporary less
        return acc


_REGULAR = frozenset(
    {"sum", "zimsum", "pfsum", "avg", "count", "min", "mimmin", "max", "mimmax",
     "squareSum", "first", "last", "mult"}
)  # fmt: skip


def _reduce_block(
    values: Float64Array,
    starts: Int64Array,
    lengths: Int64Array,
    function: str,
    where: Int64Array,
    out: Float64Array,
) -> None:
    rows = int(lengths.max())
    step = max(1, _MAX_BLOCK_CELLS // rows)
    for lo in range(0, len(starts), step):
        s = starts[lo : lo + step]
        ln = lengths[lo : lo + step]
        offsets = np.arange(rows, dtype=np.int64)[:, None]
        mask: BoolArray = offsets < ln[None, :]
        index = np.where(mask, s[None, :] + offsets, 0)
        out[where[lo : lo + step]] = run_double(function, values[index], mask)


def _fill(
    series_count: int,
    grid: Int64Array,
    seg_series: Int64Array,
    seg_times: Int64Array,
    seg_values: Float64Array,
    policy: FillPolicy,
) -> SeriesBatch:
    k = len(grid)
    filled = np.full(series_count * k, 0.0 if policy is FillPolicy.ZERO else np.nan)
    present = np.zeros(series_count * k, dtype=np.bool_)
    if k and len(seg_times):
        pos = np.minimum(np.searchsorted(grid, seg_times), k - 1)
        on_grid = grid[pos] == seg_times
        cells = seg_series[on_grid] * k + pos[on_grid]
        filled[cells] = seg_values[on_grid]
        present[cells] = True
    if policy is FillPolicy.SCALAR and not present.all():
        raise TsdError("unhandled fill policy")
    timestamps = np.tile(grid, series_count)
    return SeriesBatch(timestamps, filled, _offsets(np.full(series_count, k, dtype=np.int64)))


def _downsample_all(
    batch: SeriesBatch, function: str, query_start_ms: int, query_end_ms: int
) -> SeriesBatch:
    ts = batch.timestamps
    inside = batch.select_points((ts >= query_start_ms) & (ts < query_end_ms))
    lengths = inside.lengths
    nonempty = np.flatnonzero(lengths > 0)
    values = reduce_segments(inside.values, inside.offsets[nonempty], inside.point_count, function)
    counts = (lengths > 0).astype(np.int64)
    stamps = np.full(len(nonempty), query_start_ms, dtype=np.int64)
    return SeriesBatch(stamps, values, _offsets(counts))


def _offsets(counts: Int64Array) -> Int64Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets
