"""Query kernels (downsample + cross-series aggregation) against a numpy-only reference
doing the same arithmetic on the same arrays, measured in the same run.

Data: S series of one day at a fixed step (10 s -> 8,640 points each; 60 s -> 1,440),
float values, all series aligned — the shape of ``sum:1m-avg:metric`` over a day. The
reference knows that shape and goes straight to ``reshape(S, buckets, k).mean(2).sum(0)``;
tsd's kernels work it out from timestamps (buckets, segments, alignment and
interpolation as OpenTSDB does) and fold sums in Java's order. Also measured: a raw
``sum`` across series (no downsampling) and ``sum:1m-avg:rate``.

Run: ``python -m bench.query_kernels [--series S] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import numpy as np

from tsd.protocol.m_syntax import parse_downsample
from tsd.query.aggregate import aggregate_group
from tsd.query.series import AggregatedSeries, SeriesBatch
from tsd.query_spec import RateOptions

DAY_MS = 86_400_000
START = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000


def make_batch(series: int, step_ms: int) -> SeriesBatch:
    points = DAY_MS // step_ms
    rng = np.random.default_rng(42)
    timestamps = np.tile(START + np.arange(points, dtype=np.int64) * step_ms, series)
    values = rng.random(series * points) * 100.0
    offsets = np.arange(series + 1, dtype=np.int64) * points
    return SeriesBatch(timestamps, values, offsets)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    fn()  # warm up
    runs = []
    result: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def scenario(
    label: str, ours: Callable[[], object], baseline: Callable[[], object], repeat: int
) -> None:
    t_ours, got = timed(ours, repeat)
    t_base, want = timed(baseline, repeat)
    assert isinstance(got, AggregatedSeries)
    values = got.values
    error = float(np.nanmax(np.abs(values - np.asarray(want)))) if len(values) else 0.0
    print(
        f"{label:<34} tsd {t_ours * 1000:8.1f} ms   numpy {t_base * 1000:8.1f} ms   "
        f"ratio {t_ours / t_base:5.1f}x   max|diff| {error:.2e}"
    )


def _mean_then_sum(grid: np.ndarray) -> object:
    return grid.mean(axis=2).sum(axis=0)


def run(series: int, repeat: int) -> None:
    end = START + DAY_MS
    avg = parse_downsample("1m-avg")

    def query(batch: SeriesBatch, downsample: bool, rate: bool = False) -> AggregatedSeries:
        return aggregate_group(
            batch,
            "sum",
            start_ms=START,
            end_ms=end + 3_600_000,  # the scan window runs to the next hour
            query_start_ms=START,
            query_end_ms=end,
            downsample_spec=avg if downsample else None,
            rate=rate,
            rate_options=RateOptions(),
        )

    for step_ms in (10_000, 60_000):
        batch = make_batch(series, step_ms)
        grid = batch.values.reshape(series, DAY_MS // 60_000, 60_000 // step_ms)
        scenario(
            f"sum:1m-avg  {series}x{batch.point_count // series} ({step_ms // 1000}s)",
            functools.partial(query, batch, downsample=True),
            functools.partial(_mean_then_sum, grid),
            repeat,
        )
    batch = make_batch(series, 60_000)
    raw = batch.values.reshape(series, -1)
    scenario(
        f"sum (raw)   {series}x1440 (60s)",
        lambda: query(batch, downsample=False),
        lambda: raw.sum(axis=0),
        repeat,
    )
    fine = make_batch(series, 10_000)
    grid = fine.values.reshape(series, -1, 6)

    def rate_reference() -> object:
        means = grid.mean(axis=2)
        return (np.diff(means, axis=1) / 60.0).sum(axis=0)

    scenario(
        f"sum:1m-avg:rate {series}x8640 (10s)",
        lambda: query(fine, downsample=True, rate=True),
        rate_reference,
        repeat,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run(args.series, args.repeat)


if __name__ == "__main__":
    main()
