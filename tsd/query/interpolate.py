"""Lining up series for cross-series aggregation, as OpenTSDB's AggregationIterator does.
Pure (numpy).

Theory of operation (reference ``opentsdb-2.4-behaviour.md`` §3.1-3.2; OpenTSDB
src/core/AggregationIterator.java): the iterator keeps, per series, the last point it
consumed ("current") and the series' next point, and emits one value per distinct
timestamp of the union of all series in the window. At an emitted timestamp ``x``:

* a series contributes while ``first <= x <= last`` of its points (no extrapolation;
  a series that has not started or has ended is skipped);
* a series with a point at ``x`` gives that value, otherwise it is interpolated between
  its current and next point: LERP ``y0 + (x - x0) * (y1 - y0) / (x1 - x0)``, ZIM 0,
  MAX/MIN the type's largest/smallest value, PREV ``y0``;
* the timestamp takes the integer path only when every value the iterator holds is an
  integer: the current and next point of every live series *and* the first point of every
  series not started yet (so a later float point makes earlier output a double);
* points before ``start_ms`` are skipped, points after ``end_ms`` are never emitted but
  still serve as the "next" point for interpolation and typing.

Rates (``rate=True``) are different: no interpolation, a series gives its latest rate, and
its first rate point — the one computed against (0, 0) — is loaded as "current" up front:
it is never emitted at its own timestamp but is what the series gives until its second
point. A series with a single rate point never contributes.

The work is a matrix of S series x T timestamps, built in column blocks of bounded size:
for each cell the index of the series' current point (a forward-filled scatter), from
which the contribution mask, the values and the integer flags follow by gathers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tsd.query.series import BoolArray, Float64Array, Int64Array, SeriesBatch
from tsd.query_spec import LONG_MAX, LONG_MIN, Interpolation

#: Cells (series x timestamps) per block: bounds the temporary memory of an aggregation.
BLOCK_CELLS = 1 << 20
#: Series sharing their timestamps, up to this many cells, are aggregated as one block: the
#: values are already one matrix, which a block of columns would copy.
WHOLE_GRID_CELLS = 1 << 23

_DOUBLE_MAX = float(np.finfo(np.float64).max)


@dataclass(frozen=True, slots=True, eq=False)
class AlignedBlock:
    """Series x timestamps for one block of emitted timestamps.

    ``contributing[s, j]`` says series ``s`` takes part at ``timestamps[j]``; ``values``
    holds its double value there, ``int_values`` its long value (only meaningful in the
    columns where ``is_int_column`` is set; None when the batch has no integers).
    """

    timestamps: Int64Array
    contributing: BoolArray
    values: Float64Array
    int_values: Int64Array | None
    is_int_column: BoolArray


def emission_times(batch: SeriesBatch, end_ms: int, rate: bool) -> Int64Array:
    """The timestamps an aggregation emits (``batch`` already starts at the window)."""
    ts = batch.timestamps
    candidates = ts <= end_ms
    if rate:
        first = np.zeros(len(ts), dtype=np.bool_)
        first[batch.offsets[:-1][batch.lengths > 0]] = True
        candidates &= ~first
    return np.unique(ts[candidates])


def common_timestamps(batch: SeriesBatch) -> Int64Array | None:
    """The timestamps of every series when all series have exactly the same ones (the
    usual shape after downsampling), else None."""
    s_count, n = batch.series_count, batch.point_count
    if s_count == 0 or n == 0 or n % s_count:
        return None
    width = n // s_count
    if not bool((batch.lengths == width).all()):
        return None
    grid = batch.timestamps.reshape(s_count, width)
    return grid[0] if bool((grid == grid[0]).all()) else None


def align_common(
    batch: SeriesBatch, common: Int64Array, end_ms: int, rate: bool
) -> tuple[Int64Array, Iterator[AlignedBlock]]:
    """``(times, blocks)`` of ``align`` for series that share the timestamps ``common``:
    every series has a point at every emitted timestamp, so nothing is interpolated."""
    skip = 1 if rate else 0  # a rate series' first point is never emitted
    times = common[skip:]
    times = times[times <= end_ms]
    return times, _common_blocks(batch, len(common), times, skip)


def _common_blocks(
    batch: SeriesBatch, width: int, times: Int64Array, skip: int
) -> Iterator[AlignedBlock]:
    s_count = batch.series_count
    grid = batch.values.reshape(s_count, width)
    ints = batch.int_values.reshape(s_count, width) if batch.int_values is not None else None
    floats = None
    if batch.is_int is not None and not skip:
        is_float = ~batch.is_int.reshape(s_count, width)
        # A column is a double when any series' current or next point is one.
        floats = np.asarray(is_float.any(axis=0), dtype=np.bool_)
        floats[:-1] |= floats[1:]
    block = max(1, BLOCK_CELLS // s_count)
    if not skip and len(times) == width and s_count * width <= WHOLE_GRID_CELLS:
        block = width  # every column: the grid itself is the block (no copy)
    for lo in range(0, len(times), block):
        hi = min(lo + block, len(times))
        cols = slice(lo + skip, hi + skip)
        is_int_column = np.zeros(hi - lo, dtype=np.bool_)
        int_values = None
        if floats is not None and ints is not None:
            is_int_column = ~floats[cols]
            int_values = np.ascontiguousarray(ints[:, cols])
        yield AlignedBlock(
            times[lo:hi],
            np.ones((s_count, hi - lo), dtype=np.bool_),
            np.ascontiguousarray(grid[:, cols]),
            int_values,
            is_int_column,
        )


def align(
    batch: SeriesBatch,
    times: Int64Array,
    interpolation: Interpolation,
    rate: bool,
) -> Iterator[AlignedBlock]:
    """Yield the aligned blocks covering ``times`` (see the module docstring)."""
    s_count = batch.series_count
    if s_count == 0 or len(times) == 0:
        return
    ts = batch.timestamps
    lengths = batch.lengths
    nonempty = lengths > 0
    first_idx = batch.offsets[:-1]
    last_idx = np.where(nonempty, batch.offsets[1:] - 1, 0)
    last_ts = np.where(nonempty, ts[last_idx] if len(ts) else 0, np.iinfo(np.int64).min)
    # The column from which each point is a series' current point.
    point_col = np.searchsorted(times, ts, side="left")
    sids = batch.series_ids()
    has_ints = batch.has_integers
    pair_float = _pair_float_flags(batch) if has_ints else None
    block = max(1, BLOCK_CELLS // s_count)
    carry = np.full(s_count, -1, dtype=np.int64)
    for lo in range(0, len(times), block):
        hi = min(lo + block, len(times))
        cur = _current_points(point_col, sids, s_count, lo, hi, carry)
        carry = cur[:, -1].copy()
        x = times[lo:hi]
        yield _block(batch, x, cur, first_idx, last_ts, nonempty, interpolation, rate, pair_float)


def _current_points(
    point_col: Int64Array, sids: Int64Array, s_count: int, lo: int, hi: int, carry: Int64Array
) -> Int64Array:
    """cur[s, j]: index of series s's last point at or before column lo + j, else -1."""
    width = hi - lo
    cur = np.full((s_count, width), -1, dtype=np.int64)
    cur[:, 0] = carry
    inside = np.flatnonzero((point_col >= lo) & (point_col < hi))
    if len(inside):
        keys = sids[inside] * width + (point_col[inside] - lo)
        # Several points can map to one cell; keep the latest (keys are non-decreasing).
        last = np.ones(len(keys), dtype=np.bool_)
        last[:-1] = keys[1:] != keys[:-1]
        flat = cur.reshape(-1)
        flat[keys[last]] = np.maximum(flat[keys[last]], inside[last])
    np.maximum.accumulate(cur, axis=1, out=cur)
    return cur


def _pair_float_flags(batch: SeriesBatch) -> BoolArray:
    """Per point: it or the next point of its series is a double."""
    assert batch.is_int is not None
    is_float = ~batch.is_int
    pair = is_float.copy()
    has_next = np.ones(batch.point_count, dtype=np.bool_)
    has_next[batch.offsets[1:][batch.lengths > 0] - 1] = False
    pair[:-1] |= has_next[:-1] & is_float[1:]
    return pair


def _block(
    batch: SeriesBatch,
    x: Int64Array,
    cur: Int64Array,
    first_idx: Int64Array,
    last_ts: Int64Array,
    nonempty: BoolArray,
    interpolation: Interpolation,
    rate: bool,
    pair_float: BoolArray | None,
) -> AlignedBlock:
    ts, vals = batch.timestamps, batch.values
    started = cur >= 0
    live = x[None, :] <= last_ts[:, None]
    if rate:
        contributing = live & (batch.lengths >= 2)[:, None]
        idx = np.where(started, cur, np.minimum(first_idx, len(ts) - 1)[:, None])
        values = vals[idx]
        return AlignedBlock(x, contributing, values, None, np.zeros(len(x), dtype=np.bool_))
    contributing = started & live
    idx = np.where(started, cur, 0)
    x0 = ts[idx]
    exact = x0 == x[None, :]
    needs_next = contributing & ~exact
    nxt = np.where(needs_next, idx + 1, idx)
    values = _interpolate_doubles(x, x0, vals[idx], ts[nxt], vals[nxt], exact, interpolation)
    int_values = None
    is_int_column = np.zeros(len(x), dtype=np.bool_)
    if pair_float is not None:
        assert batch.is_int is not None
        assert batch.int_values is not None
        waiting_float = nonempty & ~batch.is_int[np.minimum(first_idx, len(ts) - 1)]
        column_float = (contributing & pair_float[idx]).any(axis=0)
        column_float |= (~started & waiting_float[:, None]).any(axis=0)
        is_int_column = np.asarray(~column_float, dtype=np.bool_)
        if is_int_column.any():
            iv = batch.int_values
            int_values = _interpolate_longs(x, x0, iv[idx], ts[nxt], iv[nxt], exact, interpolation)
    return AlignedBlock(x, contributing, values, int_values, is_int_column)


def _interpolate_doubles(
    x: Int64Array,
    x0: Int64Array,
    y0: Float64Array,
    x1: Int64Array,
    y1: Float64Array,
    exact: BoolArray,
    interpolation: Interpolation,
) -> Float64Array:
    if interpolation is Interpolation.LERP:
        with np.errstate(all="ignore"):
            dx = (x[None, :] - x0).astype(np.float64)
            span = (x1 - x0).astype(np.float64)
            filled = y0 + dx * (y1 - y0) / span
    elif interpolation is Interpolation.PREV:
        filled = y0
    else:
        constant = {Interpolation.ZIM: 0.0, Interpolation.MAX: _DOUBLE_MAX}
        filled = np.full(y0.shape, constant.get(interpolation, -_DOUBLE_MAX))
    return np.where(exact, y0, filled)


def _interpolate_longs(
    x: Int64Array,
    x0: Int64Array,
    y0: Int64Array,
    x1: Int64Array,
    y1: Int64Array,
    exact: BoolArray,
    interpolation: Interpolation,
) -> Int64Array:
    if interpolation is Interpolation.LERP:
        with np.errstate(all="ignore"):
            num = (x[None, :] - x0) * (y1 - y0)  # Java long arithmetic: wraps
            span = np.maximum(x1 - x0, 1)
            quotient = num // span
            quotient += (num % span != 0) & (num < 0)  # truncate toward zero
            filled = y0 + quotient
    elif interpolation is Interpolation.PREV:
        filled = y0
    else:
        constant = {Interpolation.ZIM: 0, Interpolation.MAX: LONG_MAX}
        filled = np.full(y0.shape, constant.get(interpolation, LONG_MIN), dtype=np.int64)
    return np.where(exact, y0, filled)
