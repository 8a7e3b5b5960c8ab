"""The array layout every query kernel takes and returns. Pure (numpy only).

A ``SeriesBatch`` holds S series back to back (a CSR layout): series ``s`` is
``timestamps[offsets[s]:offsets[s + 1]]`` / ``values[...]``, timestamps in Unix epoch
milliseconds, strictly increasing within a series (duplicates must be resolved by the
decoder, as OpenTSDB's row compaction does). Series order matters: it is the order in
which OpenTSDB's aggregators see the values (``first``, ``last``, ``diff``, ``none``).

OpenTSDB keeps integers and floats apart per data point and some answers depend on it
(integer ``avg`` truncates, an all-integer timestamp is emitted as a JSON integer). So a
batch carries, besides ``values`` (float64, every point; an integer point holds its value
converted as Java's ``(double) long`` does), an optional ``int_values`` (int64, exact) and
``is_int`` (bool) per point. Both are None when no point is an integer, which is always the
case after downsampling or rate (OpenTSDB makes those doubles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, eq=False)
class SeriesBatch:
    """S series in one set of flat arrays (see the module docstring)."""

    timestamps: Int64Array
    values: Float64Array
    offsets: Int64Array
    int_values: Int64Array | None = None
    is_int: BoolArray | None = None

    @property
    def series_count(self) -> int:
        return len(self.offsets) - 1

    @property
    def point_count(self) -> int:
        return len(self.timestamps)

    @property
    def lengths(self) -> Int64Array:
        return np.diff(self.offsets)

    @property
    def has_integers(self) -> bool:
        return self.is_int is not None and bool(self.is_int.any())

    def series_ids(self) -> Int64Array:
        """The series index of every point."""
        return np.repeat(np.arange(self.series_count, dtype=np.int64), self.lengths)

    def series(self, s: int) -> tuple[Int64Array, Float64Array]:
        lo, hi = int(self.offsets[s]), int(self.offsets[s + 1])
        return self.timestamps[lo:hi], self.values[lo:hi]

    def select_points(self, keep: BoolArray) -> SeriesBatch:
        """The batch without the points where ``keep`` is False (series stay, maybe empty)."""
        lengths = np.bincount(self.series_ids()[keep], minlength=self.series_count)
        offsets = np.zeros(self.series_count + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return SeriesBatch(
            self.timestamps[keep],
            self.values[keep],
            offsets,
            None if self.int_values is None else self.int_values[keep],
            None if self.is_int is None else self.is_int[keep],
        )

    def select_series(self, indices: Sequence[int] | Int64Array) -> SeriesBatch:
        """A batch of the given series, in the given order."""
        idx = np.asarray(indices, dtype=np.int64)
        starts, ends = self.offsets[idx], self.offsets[idx + 1]
        lengths = ends - starts
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        take = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return SeriesBatch(
            self.timestamps[take],
            self.values[take],
            offsets,
            None if self.int_values is None else self.int_values[take],
            None if self.is_int is None else self.is_int[take],
        )


def make_batch(
    series: Sequence[tuple[Sequence[int], Sequence[int | float]]],
) -> SeriesBatch:
    """Build a batch from Python lists; ``int`` values are integer points (Java longs),
    ``float`` values doubles. For tests and small inputs, not the hot path."""
    lengths = [len(ts) for ts, _ in series]
    offsets = np.zeros(len(series) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    timestamps = np.array([t for ts, _ in series for t in ts], dtype=np.int64)
    flat = [v for _, vs in series for v in vs]
    is_int = np.array([isinstance(v, int) and not isinstance(v, bool) for v in flat], bool)
    values = np.array([float(v) for v in flat], dtype=np.float64)
    if not is_int.any():
        return SeriesBatch(timestamps, values, offsets)
    int_values = np.array([v if isinstance(v, int) else 0 for v in flat], dtype=np.int64)
    values[is_int] = int_values[is_int].astype(np.float64)
    return SeriesBatch(timestamps, values, offsets, int_values, is_int)


# not frozen: a group-by answers one per series (10,000), and a frozen dataclass's
# __init__ (object.__setattr__ per field) took about twice as long; never assigned to
@dataclass(slots=True, eq=False)
class AggregatedSeries:
    """One output series of an aggregation: a point per timestamp.

    ``is_int[i]`` says OpenTSDB's integer path produced point ``i`` (emit
    ``int_values[i]`` as a JSON integer); both are None when every point is a double.
    NaN values are real NaNs (fill policies ``nan``/``null``, NaN-only inputs).
    """

    timestamps: Int64Array
    values: Float64Array
    int_values: Int64Array | None = None
    is_int: BoolArray | None = None

    def __len__(self) -> int:
        return len(self.timestamps)

    def trim(self, start_ms: int, end_ms: int) -> AggregatedSeries:
        """Only the points with ``start_ms <= timestamp <= end_ms`` (OpenTSDB's output
        filter; the aggregation itself runs over the wider scan window)."""
        keep = (self.timestamps >= start_ms) & (self.timestamps <= end_ms)
        return AggregatedSeries(
            self.timestamps[keep],
            self.values[keep],
            None if self.int_values is None else self.int_values[keep],
            None if self.is_int is None else self.is_int[keep],
        )

    def points(self) -> list[tuple[int, int | float]]:
        """``(timestamp_ms, value)`` pairs with Python ints for integer points."""
        out: list[tuple[int, int | float]] = []
        for i, ts in enumerate(self.timestamps.tolist()):
            if self.is_int is not None and self.int_values is not None and self.is_int[i]:
                out.append((ts, int(self.int_values[i])))
            else:
                out.append((ts, float(self.values[i])))
        return out


@dataclass(slots=True, eq=False)
class JoinedSeries:
    """Aggregated series end to end (a group-by's groups of one, aggregated at once):
    series ``r`` is points ``offsets[r]:offsets[r + 1]`` of ``dps``. One set of arrays
    instead of an object per series; :meth:`part` gives one series as its own."""

    dps: AggregatedSeries
    offsets: Int64Array

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def part(self, r: int) -> AggregatedSeries:
        lo, hi = int(self.offsets[r]), int(self.offsets[r + 1])
        d = self.dps
        if d.is_int is None or d.int_values is None or not d.is_int[lo:hi].any():
            return AggregatedSeries(d.timestamps[lo:hi], d.values[lo:hi])
        return AggregatedSeries(
            d.timestamps[lo:hi], d.values[lo:hi], d.int_values[lo:hi], d.is_int[lo:hi]
        )

    def split(self) -> list[AggregatedSeries]:
        return [self.part(r) for r in range(len(self))]

    @staticmethod
    def concat(parts: Sequence[JoinedSeries]) -> JoinedSeries:
        """``parts``' series one after the other."""
        if len(parts) == 1:
            return parts[0]
        dps = [p.dps for p in parts]
        ints = any(d.is_int is not None and d.int_values is not None for d in dps)
        ends = np.cumsum([0] + [len(d.timestamps) for d in dps])
        offsets = np.concatenate(
            [parts[0].offsets[:1]]
            + [p.offsets[1:] + e for p, e in zip(parts, ends.tolist(), strict=False)]
        ).astype(np.int64)
        joined = AggregatedSeries(
            np.concatenate([d.timestamps for d in dps]),
            np.concatenate([d.values for d in dps]),
            np.concatenate(
                [
                    d.int_values if d.int_values is not None else np.zeros(len(d), np.int64)
                    for d in dps
                ]
            )
            if ints
            else None,
            np.concatenate(
                [d.is_int if d.is_int is not None else np.zeros(len(d), np.bool_) for d in dps]
            )
            if ints
            else None,
        )
        return JoinedSeries(joined, offsets)
