"""Downsampling: buckets, downsample aggregators, fill policies, calendar intervals, 0all."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.query import scalar_reference as ref
from tests.query.scalar_reference import Point
from tsd.errors import TsdError
from tsd.protocol.m_syntax import parse_downsample
from tsd.query.downsample import downsample, expected_buckets, reduce_segments
from tsd.query.series import make_batch
from tsd.query_spec import DownsampleSpec

T0 = 1_356_998_400_000  # 2013-01-01T00:00:00Z
MIN = 60_000
TEN_S = [(T0 + 10_000 * i, i) for i in range(18)]  # 3 minutes of 10 s points: 0..17


def spec(text: str, **changes: object) -> DownsampleSpec:
    import dataclasses

    return dataclasses.replace(parse_downsample(text), **changes)  # type: ignore[arg-type]


def run(
    series: Sequence[Sequence[Point]],
    ds: DownsampleSpec,
    start: int = T0,
    end: int = T0 + 5 * MIN,
    qstart: int | None = None,
    qend: int | None = None,
) -> list[list[tuple[int, float]]]:
    batch = make_batch([([t for t, _ in s], [v for _, v in s]) for s in series])
    out = downsample(
        batch,
        ds,
        start_ms=start,
        end_ms=end,
        query_start_ms=start if qstart is None else qstart,
        query_end_ms=end if qend is None else qend,
    )
    assert out.is_int is None  # downsampled values are always doubles
    return [list(zip(*[a.tolist() for a in out.series(s)], strict=True))
            for s in range(out.series_count)]  # fmt: skip


def nan_safe(rows: list[list[tuple[int, float]]]) -> list[list[tuple[int, object]]]:
    return [[(t, "NaN" if math.isnan(v) else v) for t, v in row] for row in rows]


# Downsampler.java: one point per non-empty interval, stamped with the interval start,
# value = the downsample aggregator's runDouble over the interval's values.
CASES = [
    pytest.param("1m-avg", [(T0, 2.5), (T0 + MIN, 8.5), (T0 + 2 * MIN, 14.5)], id="avg"),
    pytest.param("1m-sum", [(T0, 15.0), (T0 + MIN, 51.0), (T0 + 2 * MIN, 87.0)], id="sum"),
    pytest.param("1m-count", [(T0, 6.0), (T0 + MIN, 6.0), (T0 + 2 * MIN, 6.0)], id="count"),
    pytest.param("1m-min", [(T0, 0.0), (T0 + MIN, 6.0), (T0 + 2 * MIN, 12.0)], id="min"),
    pytest.param("1m-max", [(T0, 5.0), (T0 + MIN, 11.0), (T0 + 2 * MIN, 17.0)], id="max"),
    pytest.param("1m-first", [(T0, 0.0), (T0 + MIN, 6.0), (T0 + 2 * MIN, 12.0)], id="first"),
    pytest.param("1m-last", [(T0, 5.0), (T0 + MIN, 11.0), (T0 + 2 * MIN, 17.0)], id="last"),
    pytest.param("1m-diff", [(T0, 5.0), (T0 + MIN, 5.0), (T0 + 2 * MIN, 5.0)], id="diff"),
    # Median.runDouble: the upper median of 0..5 is 3.
    pytest.param("1m-median", [(T0, 3.0), (T0 + MIN, 9.0), (T0 + 2 * MIN, 15.0)], id="median"),
    pytest.param("2m-avg", [(T0, 5.5), (T0 + 2 * MIN, 14.5)], id="two_minutes"),
    pytest.param("30s-sum", [(T0 + 30_000 * k, float(9 * k + 3)) for k in range(6)],
                 id="thirty_seconds"),
    # Percentiles downsample on the double path, legacy estimation: p50 of 0..5 = 2.5.
    pytest.param("1m-p50", [(T0, 2.5), (T0 + MIN, 8.5), (T0 + 2 * MIN, 14.5)], id="p50"),
    # 0all: one bucket over [query start, query end), stamped with the query start.
    pytest.param("0all-sum", [(T0, 153.0)], id="all"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_downsamples_like_opentsdb(text: str, expected: list[tuple[int, float]]) -> None:
    assert run([TEN_S], parse_downsample(text)) == [expected]


def test_fixed_intervals_align_to_the_epoch() -> None:
    # Downsampler.alignTimestamp: ts - ts % interval, whatever the data's phase.
    series = [(T0 + 7 * 3_600_000 + 1_000, 1), (T0 + 9 * 3_600_000 + 1_000, 2)]
    got = run([series], parse_downsample("5h-sum"), end=T0 + 86_400_000)
    # T0 is 4 h past a 5 h epoch boundary, so the boundaries are T0 + 1 h, T0 + 6 h, ...
    assert got == [[(T0 + 6 * 3_600_000, 3.0)]]


def test_seek_drops_points_before_the_first_whole_interval() -> None:
    # ValuesInInterval.seekInterval rounds the window start up to an interval boundary.
    got = run([TEN_S], parse_downsample("1m-sum"), start=T0 + 30_000)
    assert got == [[(T0 + MIN, 51.0), (T0 + 2 * MIN, 87.0)]]


@pytest.mark.parametrize(
    ("fill", "missing"),
    [
        pytest.param("nan", "NaN", id="nan"),
        pytest.param("null", "NaN", id="null_is_nan_until_serialised"),
        pytest.param("zero", 0.0, id="zero"),
    ],
)
def test_fill_policies_emit_every_interval_of_the_window(fill: str, missing: object) -> None:
    # FillingDownsampler: intervals from align(start) up to, excluding, align(end).
    series = [(T0 + 10_000, 1), (T0 + 2 * MIN + 10_000, 3)]
    got = nan_safe(run([series], parse_downsample(f"1m-sum-{fill}")))
    assert got == [
        [(T0, 1.0), (T0 + MIN, missing), (T0 + 2 * MIN, 3.0), (T0 + 3 * MIN, missing),
         (T0 + 4 * MIN, missing)]
    ]  # fmt: skip


def test_fill_emits_for_series_without_points_in_range() -> None:
    got = nan_safe(run([[(T0 + 10 * MIN, 1)]], parse_downsample("1m-sum-zero"), end=T0 + 2 * MIN))
    assert got == [[(T0, 0.0), (T0 + MIN, 0.0)]]


def test_scalar_fill_fails_when_an_interval_is_empty() -> None:
    # FillingDownsampler.next: "unhandled fill policy" for SCALAR in /api/query.
    with pytest.raises(TsdError, match="unhandled fill policy"):
        run([[(T0 + 10_000, 1)]], parse_downsample("1m-sum-scalar"))


def test_downsample_aggregator_skips_nan() -> None:
    series = [(T0, math.nan), (T0 + 10_000, 2.0), (T0 + 20_000, 4.0)]
    assert run([series], parse_downsample("1m-avg")) == [[(T0, 3.0)]]


def test_all_excludes_the_query_end_and_empty_series() -> None:
    series = [(T0, 1), (T0 + MIN, 2), (T0 + 2 * MIN, 4)]
    got = run([series, []], parse_downsample("0all-sum"), qstart=T0 + 1, qend=T0 + 2 * MIN)
    assert got == [[(T0 + 1, 2.0)], []]


NY = "America/New_York"


@pytest.mark.parametrize(
    ("text", "timezone", "series", "start", "expected"),
    [
        # 1d in New York: days start at 05:00Z in winter (UTC would put both in one day).
        pytest.param("1dc-sum", NY, [(1_577_851_200_000, 1), (1_577_858_400_000, 2)],
                     1_577_750_400_000, [(1_577_768_400_000, 1.0), (1_577_854_800_000, 2.0)],
                     id="day_new_york"),
        pytest.param("1d-sum", "UTC", [(1_577_851_200_000, 1), (1_577_858_400_000, 2)],
                     1_577_750_400_000, [(1_577_836_800_000, 3.0)], id="day_utc_fixed"),
        # Months: Jan 15 and Feb 3 2020 -> Jan 1 and Feb 1.
        pytest.param("1nc-sum", "UTC", [(1_579_046_400_000, 1), (1_580_688_000_000, 2)],
                     1_577_836_800_000, [(1_577_836_800_000, 1.0), (1_580_515_200_000, 2.0)],
                     id="month"),
        # Weeks start on Sunday: Wednesday 2020-01-15 -> Sunday 2020-01-12.
        pytest.param("1wc-sum", "UTC", [(1_579_046_400_000, 5)], 1_578_787_200_000,
                     [(1_578_787_200_000, 5.0)], id="week_sunday"),
        # 7 minutes does not divide an hour: intervals run from midnight (00:07 at 00:10).
        pytest.param("7mc-sum", "UTC", [(T0 + 10 * MIN, 1)], T0,
                     [(T0 + 7 * MIN, 1.0)], id="seven_minutes_from_midnight"),
        # Hours step by fixed durations across DST (2020-03-08 in New York).
        pytest.param("1hc-sum", NY, [(1_583_650_800_000, 1), (1_583_654_400_000, 2)],
                     1_583_647_200_000, [(1_583_650_800_000, 1.0), (1_583_654_400_000, 2.0)],
                     id="hours_across_dst"),
    ],
)  # fmt: skip
def test_calendar_intervals(
    text: str, timezone: str, series: list[Point], start: int, expected: list[tuple[int, float]]
) -> None:
    ds = spec(text, timezone=timezone)
    assert run([series], ds, start=start, end=start + 90 * 86_400_000) == [expected]


def test_calendar_fill_uses_calendar_steps() -> None:
    ds = spec("1dc-sum-zero", timezone=NY)
    start = 1_583_625_600_000  # 2020-03-08T00:00Z; the NY day of 03-08 starts at 05:00Z
    buckets = expected_buckets(ds, start, start + 3 * 86_400_000).tolist()
    # Midnights of 03-07 and 03-08 (EST) and 03-09 (EDT, 23 h later); the interval holding
    # the end (03-10) is not emitted.
    assert buckets == [1_583_557_200_000, 1_583_643_600_000, 1_583_726_400_000]


def test_reduce_segments_handles_uneven_segment_lengths() -> None:
    import numpy as np

    values = np.arange(1000, dtype=np.float64)
    starts = np.array([0, 1, 2, 999], dtype=np.int64)
    got = reduce_segments(values, starts, 1000, "sum").tolist()
    assert got == [0.0, 1.0, float(sum(range(2, 999))), 999.0]


# ------------------------------------------------------------------ differential

SPECS = ["1m-avg", "1m-sum-nan", "2m-max-zero", "90s-dev", "1m-p95", "1m-median", "3m-mult",
         "1m-diff-null", "0all-count", "1mc-ep99r7", "5mc-last-nan", "1hc-squareSum",
         "1dc-first", "1m-zimsum-zero"]  # fmt: skip


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=150, deadline=None)
@given(
    series=st.lists(
        st.lists(
            st.tuples(st.integers(0, 120),
                      st.one_of(st.integers(-100, 100), st.floats(-1e3, 1e3), st.just(math.nan))),
            max_size=12, unique_by=lambda p: p[0],
        ).map(lambda ps: sorted((T0 + t * 5_000, v) for t, v in ps)),
        min_size=1, max_size=3,
    ),
    text=st.sampled_from(SPECS),
    timezone=st.sampled_from(["UTC", NY, "Asia/Kolkata"]),
    start_offset=st.integers(0, 4) ,
)  # fmt: skip
def test_matches_scalar_reference(
    series: list[list[Point]], text: str, timezone: str, start_offset: int
) -> None:
    ds = spec(text, timezone=timezone)
    start = T0 + start_offset * 30_000
    end = T0 + 11 * MIN
    got = run(series, ds, start=start, end=end)
    want = [ref.downsample(s, ds, start, end, start, end) for s in series]
    assert nan_safe(got) == nan_safe(want)


# -- the regular-grid path ---------------------------------------------------------------------


def _grid_batch(rng: object, series: int, step_ms: int, points: int, t0: int, nan: bool):
    import numpy as np

    from tsd.query.series import SeriesBatch

    assert isinstance(rng, np.random.Generator)
    ts = t0 + step_ms * np.arange(points, dtype=np.int64)
    values = np.round(rng.normal(0, 100, series * points), 2)
    if nan:
        values[rng.random(series * points) < 0.05] = np.nan
    offsets = np.arange(series + 1, dtype=np.int64) * points
    return SeriesBatch(np.tile(ts, series), values, offsets)


@pytest.mark.parametrize("seed", range(40))
def test_regular_grid_path_gives_the_general_answer(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Series sharing their timestamps take _shared_segments; the same batch through the
    # general path (the shortcut switched off) must give the same bytes.
    import numpy as np

    import tsd.query.downsample as ds_module

    rng = np.random.default_rng(seed)
    step_ms = int(rng.choice([10_000, 15_000, 60_000, 250, 1_000, 7_000]))
    interval = str(rng.choice(["1m", "30s", "5m", "1h", "10s", "1s"]))
    function = str(rng.choice(["avg", "sum", "min", "max", "count", "last", "dev", "zimsum"]))
    fill = str(rng.choice(["", "-nan", "-zero", "-null"]))
    t0 = T0 + int(rng.integers(0, 3)) * 3_600_000 + int(rng.choice([0, 1, 5_000, 59_999]))
    batch = _grid_batch(rng, int(rng.integers(2, 20)), step_ms, int(rng.integers(1, 800)), t0,
                        rng.random() < 0.25)  # fmt: skip
    ds = parse_downsample(f"{interval}-{function}{fill}")
    start = T0 + int(rng.integers(0, 2)) * 3_600_000 + int(rng.choice([0, 30_000]))
    end = t0 + step_ms * 900
    args = {"start_ms": start, "end_ms": end, "query_start_ms": start, "query_end_ms": end}
    fast = downsample(batch, ds, **args)
    monkeypatch.setattr(ds_module, "_shared_segments", lambda *a: None)
    general = downsample(batch, ds, **args)
    assert fast.offsets.tolist() == general.offsets.tolist()
    assert fast.timestamps.tolist() == general.timestamps.tolist()
    assert fast.values.tobytes() == general.values.tobytes()


def test_regular_grid_path_is_taken() -> None:
    # Not a test that cannot fail: the shortcut must really answer for a plain grid.
    import numpy as np

    from tsd.query.downsample import _seek_time, _shared_segments

    batch = _grid_batch(np.random.default_rng(1), 5, 10_000, 360, T0, False)
    ds = parse_downsample("1m-avg")
    assert _shared_segments(batch, ds, _seek_time(ds, T0)) is not None


@pytest.mark.parametrize("function", ["sum", "avg", "squareSum", "mult", "min", "max"])
def test_regular_grids_reduce_in_slices_as_one_column_fold(function: str) -> None:
    # More rows than one cache-sized slice: the sliced fold is the Java loop's, value for
    # value (each row folded from its first column to its last, sums from 0.0).
    from tsd.query.downsample import _reduce_regular, _slice_rows

    rng = np.random.default_rng(5)
    grid = np.round(rng.normal(0, 100, size=(3 * _slice_rows(6) + 7, 6)), 2)
    got = _reduce_regular(grid, function)
    assert got is not None
    if function in ("min", "max"):
        want = grid.min(axis=1) if function == "min" else grid.max(axis=1)
    elif function == "mult":
        want = grid[:, 0].copy()
        for j in range(1, 6):
            want = want * grid[:, j]
    else:
        want = np.zeros(len(grid))
        for j in range(6):
            want = want + (grid[:, j] * grid[:, j] if function == "squareSum" else grid[:, j])
        if function == "avg":
            want = want / 6
    assert got.tobytes() == want.tobytes()
