"""Decoded rows -> series (OpenTSDB's spans), in SpanCmp order. Pure (numpy).

Theory of operation (OpenTSDB 2.4.1 src/core/TsdbQuery.java SpanCmp, Span.addRow): a
series is the row key without its base time (salt, metric, tags); series are ordered by
those bytes, salt first, so with salting the buckets come in order. A series' rows are put
in base time order and their points moved as whole row slices (or one fancy index for
small rows) into one :class:`~tsd.query.series.SeriesBatch`. Rows whose points overlap
(offsets beyond the hour, which no writer produces) are merged keeping the first point at
a time, as Span does by merging into the earlier row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from tsd.codec import AnnotationCell, KeyLayout
from tsd.codec.const import TIMESTAMP_BYTES
from tsd.query.decode import RowPoints, key_times, series_key
from tsd.query.series import BoolArray, Int64Array, SeriesBatch

__all__ = ["Spans", "assemble_spans"]

_EMPTY_I = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class Spans:
    """Series (OpenTSDB spans) of a scan, in SpanCmp order.

    ``keys[s]`` is series ``s``'s row key without the base time (salt, metric, tags);
    ``annotations[s]`` its annotation cells sorted by time.
    """

    keys: list[bytes]
    batch: SeriesBatch
    annotations: list[list[AnnotationCell]] = field(default_factory=list)
    #: rows reduced to buckets as decoded (``RowPoints.row_points``): the data points each
    #: series had (``batch`` holds its buckets); None when ``batch`` holds the points
    series_points: Int64Array | None = None

    @property
    def series_count(self) -> int:
        return len(self.keys)

    @property
    def point_lengths(self) -> Int64Array:
        """The data points of each series (before any reduction to buckets)."""
        return self.batch.lengths if self.series_points is None else self.series_points


def assemble_spans(parts: Sequence[tuple[Sequence[bytes], RowPoints]], layout: KeyLayout) -> Spans:
    """Group decoded rows into series, in SpanCmp order.

    ``parts`` are (row keys, their decoded points) per decoded batch, in any order. Rows of
    one series are put in base time order; overlapping rows (points beyond the hour in a
    row, which no writer produces) are merged keeping the first point at a time. Work is
    per row: points move as whole row slices, straight from the parts.
    """
    keys: list[bytes] = list(chain.from_iterable(ks for ks, _ in parts))
    if len(keys) <= FEW_ROWS:
        few = _few_rows_spans(parts, keys, layout)
        if few is not None:
            return few
    unique, row_series, row_base = _series_of_rows(layout, keys)
    points = [p for _, p in parts]
    counts = _cat([np.diff(p.row_offsets) for p in points], np.int64)
    row_part = _cat(
        [np.full(len(p.row_offsets) - 1, i, np.int64) for i, p in enumerate(points)], np.int64
    )
    row_start = _cat([p.row_offsets[:-1] for p in points], np.int64)
    order = np.lexsort((row_base, row_series))
    moves = _RowMoves(row_part[order], row_start[order], counts[order])
    int_values: Int64Array | None = None
    is_int: BoolArray | None = None
    if _in_place(points, order):  # one part, its rows in order already (a raw query's)
        only = points[0]
        ts, values = only.timestamps.copy(), only.values.copy()
        if only.is_int is not None:
            is_int = only.is_int.copy()
            int_values = (
                only.int_values.copy()
                if only.int_values is not None
                else np.zeros(only.point_count, np.int64)
            )
    else:
        ts = moves.gather([p.timestamps for p in points], np.int64)
        values = moves.gather([p.values for p in points], np.float64)
    if is_int is None and any(p.is_int is not None for p in points):
        int_values = moves.gather(
            [
                p.int_values if p.int_values is not None else np.zeros(p.point_count, np.int64)
                for p in points
            ],
            np.int64,
        )
        is_int = moves.gather(
            [
                p.is_int if p.is_int is not None else np.zeros(p.point_count, np.bool_)
                for p in points
            ],
            np.bool_,
        )
    series_of_row = row_series[order]
    series_counts = np.bincount(series_of_row, weights=moves.counts, minlength=len(unique))
    offsets = np.zeros(len(unique) + 1, dtype=np.int64)
    np.cumsum(series_counts.astype(np.int64), out=offsets[1:])
    if _rows_overlap(ts, series_of_row, moves.counts):
        keep, offsets = _first_of_overlaps(ts, np.repeat(series_of_row, moves.counts), len(unique))
        ts, values = ts[keep], values[keep]
        if int_values is not None and is_int is not None:
            int_values, is_int = int_values[keep], is_int[keep]
    notes: list[list[AnnotationCell]] = [[] for _ in unique]
    if any(p.annotations for p in points):
        first_row = 0
        for ks, p in parts:
            for r, note in p.annotations:
                notes[int(row_series[first_row + r])].append(note)
            first_row += len(ks)
        for series_notes in notes:
            series_notes.sort(key=lambda a: a.timestamp_ms)
    if int_values is not None and is_int is not None and is_int.any():
        batch = SeriesBatch(ts, values, offsets, int_values, is_int)
    else:
        batch = SeriesBatch(ts, values, offsets)
    series_points = None
    if points and all(p.row_points is not None for p in points):
        row_points = _cat([p.row_points for p in points if p.row_points is not None], np.int64)
        series_points = np.bincount(row_series, weights=row_points, minlength=len(unique))
        series_points = series_points.astype(np.int64)
    return Spans(unique, batch, notes, series_points)


#: up to this many rows, the series of the rows are found one key at a time
FEW_ROWS = 32


def _few_rows_spans(
    parts: Sequence[tuple[Sequence[bytes], RowPoints]], keys: list[bytes], layout: KeyLayout
) -> Spans | None:
    """:func:`assemble_spans` of a few rows (a dashboard's filter of a few series: up to
    ``FEW_ROWS``), row by row in Python rather than by two dozen numpy calls whose set-up
    outweighs their work there: the same series, points and order. None (the general path
    answers) for no rows, annotations or rows of a series that overlap."""
    if not keys or any(p.annotations for _, p in parts):
        return None
    points = [p for _, p in parts]
    bases = key_times(layout, keys)[1].tolist()
    rows: list[tuple[bytes, int, int, int, int, int]] = []  # series, base, part, row, start, n
    for part, p in enumerate(points):
        offsets = p.row_offsets.tolist()
        for r in range(len(offsets) - 1):
            i, start = len(rows), offsets[r]
            key = series_key(layout, keys[i])
            rows.append((key, bases[i], part, r, start, offsets[r + 1] - start))
    rows.sort(key=_series_then_base)  # stable: SpanCmp's order, as the general path's lexsort
    unique: list[bytes] = []
    counts: list[int] = []
    last_ts = 0  # the last point of the series' previous non-empty row
    for key, _, part, _, start, count in rows:
        if not unique or unique[-1] != key:
            unique.append(key)
            counts.append(0)
        elif count and counts[-1] and int(points[part].timestamps[start]) <= last_ts:
            return None  # overlapping rows of a series: merged by the general path
        if count:
            last_ts = int(points[part].timestamps[start + count - 1])
            counts[-1] += count
    cuts = [(points[part], start, start + count) for _, _, part, _, start, count in rows]
    if len(points) == 1 and all(r[3] == i for i, r in enumerate(rows)):  # in order already
        # (a day of one series): the rows end to end are one slice
        cuts = [(points[0], rows[0][4], rows[-1][4] + rows[-1][5])]
    ts = np.concatenate([p.timestamps[a:b] for p, a, b in cuts]).astype(np.int64, copy=False)
    values = np.concatenate([p.values[a:b] for p, a, b in cuts]).astype(np.float64, copy=False)
    offsets = np.zeros(len(unique) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    batch = SeriesBatch(ts, values, offsets)
    if any(p.is_int is not None for p in points):
        is_int = np.concatenate([_or_zeros(p.is_int, a, b, np.bool_) for p, a, b in cuts])
        if is_int.any():
            ints = np.concatenate([_or_zeros(p.int_values, a, b, np.int64) for p, a, b in cuts])
            batch = SeriesBatch(ts, values, offsets, ints, is_int)
    series_points = None
    if all(p.row_points is not None for p in points):
        held = dict.fromkeys(unique, 0)
        for key, _, part, r, _, _ in rows:
            held[key] += int(points[part].row_points[r])  # type: ignore[index]
        series_points = np.array([held[k] for k in unique], np.int64)
    return Spans(unique, batch, [[] for _ in unique], series_points)


def _series_then_base(row: tuple[bytes, int, int, int, int, int]) -> tuple[bytes, int]:
    return row[0], row[1]


def _or_zeros(
    array: npt.NDArray[_T] | None, start: int, stop: int, dtype: type[_T]
) -> npt.NDArray[_T]:
    """``array[start:stop]``, or as many zeros where there is no array."""
    return array[start:stop] if array is not None else np.zeros(stop - start, dtype)


def _in_place(points: list[RowPoints], order: Int64Array) -> bool:
    """True when the rows need no move: one part, whose rows are in series and time
    order and whose points are its rows' end to end (the gather would copy it as it is)."""
    if len(points) != 1:
        return False
    only = points[0]
    offsets = only.row_offsets
    return (
        int(offsets[0]) == 0
        and int(offsets[-1]) == len(only.timestamps) == len(only.values)
        and bool((order[1:] > order[:-1]).all())
    )


def _series_of_rows(
    layout: KeyLayout, keys: list[bytes]
) -> tuple[list[bytes], Int64Array, Int64Array]:
    """(series keys sorted as SpanCmp sorts them, each row's series, each row's base time).

    Keys of one length (the usual case: one tag set shape) are handled as a byte matrix;
    others, and a few rows (``FEW_ROWS``: the matrix's fixed cost is more than their
    work), one by one.
    """
    time_at = layout.tags_start - TIMESTAMP_BYTES
    lengths, row_base = key_times(layout, keys)
    if len(keys) > FEW_ROWS and lengths.min() == lengths.max():
        width = len(keys[0])
        matrix = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), width)
        rest_width = width - TIMESTAMP_BYTES
        # The series bytes zero-padded to whole big-endian words: words compare as memcmp
        # does (equal lengths), and sorting integer columns is several times faster than
        # np.unique over void rows.
        words = -(-rest_width // 8)
        rest = np.zeros((len(keys), words * 8), dtype=np.uint8)
        rest[:, :time_at] = matrix[:, :time_at]
        rest[:, time_at:rest_width] = matrix[:, time_at + TIMESTAMP_BYTES :]
        columns = rest.view(">u8").astype(np.uint64)
        order = np.lexsort(columns.T[::-1])
        ordered = columns[order]
        first = np.ones(len(keys), dtype=np.bool_)
        first[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
        row_series = np.empty(len(keys), dtype=np.int64)
        row_series[order] = np.cumsum(first) - 1
        joined = np.ascontiguousarray(rest[order[first], :rest_width]).tobytes()
        series_keys = [joined[i : i + rest_width] for i in range(0, len(joined), rest_width)]
        return series_keys, row_series, row_base
    sk = [series_key(layout, k) for k in keys]
    unique = sorted(set(sk))
    rank = {key: i for i, key in enumerate(unique)}
    row_series = np.fromiter((rank[k] for k in sk), np.int64, len(sk))
    return unique, row_series, row_base


_T = TypeVar("_T", bound=np.generic)

#: Below this many points per row, moving rows as slices costs more than one fancy index.
_SLICE_MIN_POINTS = 256


@dataclass(frozen=True, slots=True, eq=False)
class _RowMoves:
    """Rows to copy, in output order: from which part, where there, how many points."""

    part: Int64Array
    start: Int64Array
    counts: Int64Array

    def gather(self, arrays: list[npt.NDArray[_T]], dtype: type[_T]) -> npt.NDArray[_T]:
        total = int(self.counts.sum())
        if total == 0:
            return np.zeros(0, dtype=dtype)
        if len(self.counts) <= FEW_ROWS:  # a few rows: a slice each (fewer numpy calls)
            return self._sliced(arrays, dtype)
        uniform = _gather_uniform(self, arrays, dtype, total)
        if uniform is not None:
            return uniform
        if total < _SLICE_MIN_POINTS * len(self.counts):
            # Small rows: one fancy index over the parts laid end to end.
            sizes = np.array([len(a) for a in arrays], dtype=np.int64)
            part_base = np.cumsum(sizes) - sizes
            whole = _cat(arrays, dtype)
            return whole[_gather_rows(part_base[self.part] + self.start, self.counts)]
        return self._sliced(arrays, dtype)

    def _sliced(self, arrays: list[npt.NDArray[_T]], dtype: type[_T]) -> npt.NDArray[_T]:
        """Big rows (or a few): one view per row, joined by one concatenate (several times
        faster than copying the slices one by one into an output array)."""
        rows = zip(self.part.tolist(), self.start.tolist(), self.counts.tolist(), strict=True)
        return np.concatenate(
            [arrays[part][start : start + count] for part, start, count in rows]
        ).astype(dtype, copy=False)


def _gather_uniform(
    moves: _RowMoves, arrays: list[npt.NDArray[_T]], dtype: type[_T], total: int
) -> npt.NDArray[_T] | None:
    """:meth:`_RowMoves.gather` when every row holds as many points and every point moves
    (a regular grid, compacted): the parts laid end to end are a rows x points matrix,
    whose rows are taken in one fancy index. None otherwise."""
    width = int(moves.counts[0])
    if not width or total != width * len(moves.counts) or sum(map(len, arrays)) != total:
        return None
    if not (moves.counts == width).all():  # the total alone does not say every row is full
        return None
    sizes = np.array([len(a) for a in arrays], dtype=np.int64)
    part_base = np.cumsum(sizes) - sizes
    rows = (part_base[moves.part] + moves.start) // width
    # Scattered part by part (each row of a part to its place), not joined first and then
    # gathered: one copy of every point instead of two.
    where = np.empty(len(rows), dtype=np.int64)
    where[rows] = np.arange(len(rows), dtype=np.int64)
    out = np.empty((len(rows), width), dtype=dtype)
    first = 0
    for array in arrays:
        count = len(array) // width
        out[where[first : first + count]] = array.reshape(count, width)
        first += count
    return out.reshape(-1)


def _rows_overlap(ts: Int64Array, series_of_row: Int64Array, counts: Int64Array) -> bool:
    """True when a row of a series does not start after the previous row of it ended."""
    nonempty = counts > 0
    if nonempty.sum() < 2:
        return False
    ends = np.cumsum(counts)[nonempty]
    firsts = ends - counts[nonempty]
    series = series_of_row[nonempty]
    same = series[1:] == series[:-1]
    return bool((same & (ts[firsts[1:]] <= ts[ends[:-1] - 1])).any())


def _first_of_overlaps(
    ts: Int64Array, point_series: Int64Array, n_series: int
) -> tuple[Int64Array, Int64Array]:
    """(indices to keep, new series offsets): per series, time order, first point at a time."""
    order = np.lexsort((ts, point_series))
    sorted_ts, sorted_series = ts[order], point_series[order]
    keep = np.ones(len(order), dtype=np.bool_)
    keep[1:] = (sorted_series[1:] != sorted_series[:-1]) | (sorted_ts[1:] != sorted_ts[:-1])
    offsets = np.zeros(n_series + 1, dtype=np.int64)
    np.cumsum(np.bincount(sorted_series[keep], minlength=n_series), out=offsets[1:])
    return order[keep], offsets


def _cat(arrays: list[npt.NDArray[_T]], dtype: type[_T]) -> npt.NDArray[_T]:
    if not arrays:
        return np.zeros(0, dtype=dtype)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _gather_rows(starts: Int64Array, counts: Int64Array) -> Int64Array:
    """Indices of ``counts[i]`` items from ``starts[i]``, row after row."""
    total = int(counts.sum())
    if total == 0:
        return _EMPTY_I
    firsts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=firsts[1:])
    return np.repeat(starts - firsts, counts) + np.arange(total, dtype=np.int64)
