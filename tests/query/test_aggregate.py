"""Cross-series aggregation: every aggregator, interpolation, integer vs double rules."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.query import scalar_reference as ref
from tests.query.scalar_reference import Point
from tsd.errors import TsdError
from tsd.protocol.m_syntax import parse_downsample
from tsd.query import interpolate
from tsd.query.aggregate import (
    aggregate_each,
    aggregate_each_joined,
    aggregate_group,
    aggregate_series,
)
from tsd.query.plan import scan_window_s
from tsd.query.reducers import AGGREGATORS
from tsd.query.series import JoinedSeries, make_batch
from tsd.query_spec import AGGREGATOR_NAMES, DownsampleSpec, Interpolation, RateOptions

LONG_MAX = 2**63 - 1

A_INT = [(1000, 1), (2000, 2), (3000, 3)]
B_INT = [(1500, 10), (2500, 20)]
GAP = [(1000, 1), (3000, 3)]
MID = [(2000, 5)]


def run(
    series: Sequence[Sequence[Point]], name: str, start: int = 0, end: int = 10_000,
    rate: bool = False,
) -> list[Point]:  # fmt: skip
    result = aggregate_series(
        make_batch(_columns(series)), name, start_ms=start, end_ms=end, rate=rate
    )
    return [(t, v) for t, v in result.points()]


def _columns(series: Sequence[Sequence[Point]]) -> list[tuple[list[int], list[int | float]]]:
    return [([t for t, _ in s], [v for _, v in s]) for s in series]


def typed(points: Sequence[Point]) -> list[tuple[int, str, object]]:
    """Points with the value's type made explicit (1 == 1.0 in Python)."""
    return [(t, type(v).__name__, v if not (isinstance(v, float) and math.isnan(v)) else "NaN")
            for t, v in points]  # fmt: skip


def test_registers_the_35_aggregators_of_opentsdb_2_4():
    # src/core/Aggregators.java static block: 17 named + 18 percentiles.
    assert len(AGGREGATOR_NAMES) == 35
    assert set(AGGREGATORS) == set(AGGREGATOR_NAMES)
    assert {"squareSum", "pfsum", "mult", "p999", "ep50r3", "ep999r7"} <= set(AGGREGATOR_NAMES)


@pytest.mark.parametrize(
    ("name", "interpolation"),
    [
        pytest.param("sum", Interpolation.LERP, id="sum_lerp"),
        pytest.param("zimsum", Interpolation.ZIM, id="zimsum_zim"),
        pytest.param("pfsum", Interpolation.PREV, id="pfsum_prev"),
        pytest.param("mimmin", Interpolation.MAX, id="mimmin_max"),
        pytest.param("mimmax", Interpolation.MIN, id="mimmax_min"),
        pytest.param("count", Interpolation.ZIM, id="count_zim"),
        pytest.param("first", Interpolation.ZIM, id="first_zim"),
        pytest.param("none", Interpolation.ZIM, id="none_zim"),
        pytest.param("p99", Interpolation.LERP, id="percentile_lerp"),
    ],
)
def test_aggregator_interpolation_matches_opentsdb(name, interpolation):
    # Aggregators.java: the Interpolation passed to each constructor.
    assert AGGREGATORS[name].interpolation is interpolation


# Expected values follow AggregationIterator.next/nextLongValue/nextDoubleValue and the
# runLong/runDouble of each aggregator in src/core/Aggregators.java (2.4.1).
CASES = [
    # Integer LERP truncates: at 1500 series A is 1 + 500 * 1 / 1000 = 1.
    pytest.param([A_INT, B_INT], "sum", [(1000, 1), (1500, 11), (2000, 17), (2500, 22), (3000, 3)],
                 id="sum_integer_lerp"),
    # Avg.runLong: integer division truncates (avg of 1 and 10 at 1500 is 5).
    pytest.param([A_INT, B_INT], "avg", [(1000, 1), (1500, 5), (2000, 8), (2500, 11), (3000, 3)],
                 id="avg_integer_truncates"),
    pytest.param([[(1000, 1.0)], [(1000, 2)]], "avg", [(1000, 1.5)], id="avg_double"),
    # Median: sorted[n / 2], the upper median, no averaging.
    pytest.param([[(1000, v)] for v in (4, 1, 3, 2)], "median", [(1000, 3)], id="median_upper"),
    # Count counts interpolated series (COUNT uses ZIM but counts the value, not its 0).
    pytest.param([GAP, MID], "count", [(1000, 1), (2000, 2), (3000, 1)], id="count_interpolated"),
    pytest.param([GAP, MID], "zimsum", [(1000, 1), (2000, 5), (3000, 3)], id="zimsum_zero_fill"),
    pytest.param([GAP, MID], "min", [(1000, 1), (2000, 2), (3000, 3)], id="min_lerp"),
    pytest.param([GAP, MID], "mimmin", [(1000, 1), (2000, 5), (3000, 3)], id="mimmin_skip"),
    pytest.param([GAP, MID], "mimmax", [(1000, 1), (2000, 5), (3000, 3)], id="mimmax_skip"),
    pytest.param([GAP, MID], "max", [(1000, 1), (2000, 5), (3000, 3)], id="max_lerp"),
    pytest.param([GAP, MID], "pfsum", [(1000, 1), (2000, 6), (3000, 3)], id="pfsum_previous"),
    pytest.param([GAP, MID], "first", [(1000, 1), (2000, 0), (3000, 3)], id="first_zim"),
    pytest.param([GAP, MID], "last", [(1000, 1), (2000, 5), (3000, 3)], id="last_zim"),
    # StdDev: population form (M2 / n); runLong casts to long.
    pytest.param([[(1000, float(v))] for v in (2, 4, 4, 4, 5, 5, 7, 9)], "dev", [(1000, 2.0)],
                 id="dev_double_population"),
    pytest.param([[(1000, v)] for v in (1, 2)], "dev", [(1000, 0)], id="dev_long_truncated"),
    pytest.param([[(1000, 7)]], "dev", [(1000, 0)], id="dev_single_value_zero"),
    # Diff: last minus first in series order.
    pytest.param([[(1000, 5)], [(1000, 3)]], "diff", [(1000, -2)], id="diff_last_minus_first"),
    pytest.param([[(1000, v)] for v in (2, 3, 4)], "mult", [(1000, 24)], id="mult"),
    pytest.param([[(1000, v)] for v in (1, 2, 3)], "squareSum", [(1000, 14)], id="square_sum"),
    # Percentiles: commons-math3 estimation; p* legacy, ep*r3 / ep*r7 on the long path.
    pytest.param([[(1000, v)] for v in (1, 2, 3, 4)], "p50", [(1000, 2)], id="p50_long_legacy"),
    pytest.param([[(1000, float(v))] for v in (1, 2, 3, 4)], "p50", [(1000, 2.5)],
                 id="p50_double_legacy"),
    pytest.param([[(1000, v)] for v in (1, 2, 3, 4)], "ep50r3", [(1000, 2)], id="ep50r3_long"),
    pytest.param([[(1000, v)] for v in (1, 2, 3, 4)], "ep90r7", [(1000, 3)], id="ep90r7_long"),
    # The double path ignores the estimation type (OpenTSDB bug): legacy p90 = 4.0, not 3.7.
    pytest.param([[(1000, float(v))] for v in (1, 2, 3, 4)], "ep90r7", [(1000, 4.0)],
                 id="ep90r7_double_uses_legacy"),
    # A float anywhere the iterator holds a value makes the timestamp a double: here the
    # next point of series A at 1000, and at 2000 the value itself.
    pytest.param([[(1000, 1), (2000, 2.5)], [(1000, 2)]], "sum", [(1000, 3.0), (2000, 2.5)],
                 id="float_next_point_forces_double"),
    # ... also the first point of a series that has not started yet.
    pytest.param([[(1000, 1)], [(5000, 2.5)]], "sum", [(1000, 1.0), (5000, 2.5)],
                 id="float_waiting_series_forces_double"),
    # Series contribute only between their first and last points.
    pytest.param([[(1000, 1), (2000, 2)], [(3000, 10), (4000, 20)]], "sum",
                 [(1000, 1), (2000, 2), (3000, 10), (4000, 20)], id="no_extrapolation"),
    pytest.param([[(1000, math.nan)], [(1000, math.nan)]], "sum", [(1000, math.nan)],
                 id="sum_of_nan_is_nan"),
    pytest.param([[(1000, math.nan)], [(1000, 2.0)]], "count", [(1000, 1.0)], id="count_skips_nan"),
    pytest.param([[(1000, math.nan)], [(1000, 2.0)]], "mult", [(1000, math.nan)],
                 id="mult_keeps_nan"),
]  # fmt: skip


@pytest.mark.parametrize(("series", "name", "expected"), CASES)
def test_aggregates_like_opentsdb(series, name, expected):
    assert typed(run(series, name)) == typed(expected)


def test_points_after_end_interpolate_but_are_not_emitted():
    # AggregationIterator.hasNext only emits timestamps <= end_time, but the next
    # point of a series is held (and used) whatever its timestamp.
    series = [[(1000, 0), (3000, 20)], [(2000, 5)]]
    assert run(series, "sum", end=2500) == [(1000, 0), (2000, 15)]


def test_points_before_start_are_skipped():
    series = [[(500, 100), (1500, 1)], [(1500, 2)]]
    assert run(series, "sum", start=1000) == [(1500, 3)]


def test_none_with_two_values_at_one_timestamp_fails():
    # None.runLong/runDouble: IllegalDataException "More than one value in aggregator".
    with pytest.raises(TsdError, match="More than one value"):
        run([[(1000, 1)], [(1000, 2)]], "none")


def test_infinite_double_aggregate_fails():
    # AggregationIterator.doubleValue: IllegalStateException "Got Infinity".
    with pytest.raises(TsdError, match="Got Infinity"):
        run([[(1000, 1.5e308)], [(1000, 1.5e308)]], "sum")


def test_rate_mode_uses_previous_rate_without_lerp():
    # nextDoubleValue with rate: y0 of the series (its previous rate), and the first
    # rate of every series is preloaded and never emitted at its own timestamp.
    series = [[(1000, 1.0), (2000, 2.0), (3000, 3.0)], [(1500, 10.0), (2500, 20.0)]]
    assert run(series, "sum", rate=True) == [(2000, 12.0), (2500, 22.0), (3000, 3.0)]


def test_rate_mode_single_point_series_never_contributes():
    assert run([[(1000, 1.0), (2000, 2.0)], [(1500, 10.0)]], "sum", rate=True) == [(2000, 2.0)]


def test_integer_lerp_wraps_like_java_longs():
    series = [[(1000, 0), (3000, LONG_MAX)], [(2000, 0)]]
    expected = ref.aggregate(series, "sum", 0, 10_000)
    assert run(series, "sum") == [(t, v) for t, v, _ in expected]


def test_blocks_of_timestamps_carry_state_across(monkeypatch):
    monkeypatch.setattr(interpolate, "BLOCK_CELLS", 16)
    rng = np.random.default_rng(7)
    series = [
        [(int(t), int(v)) for t, v in zip(np.sort(rng.choice(500, 12, replace=False)) * 10,
                                         rng.integers(0, 100, 12), strict=True)]
        for _ in range(40)
    ]  # fmt: skip
    got = run(series, "sum", end=100_000)
    want = ref.aggregate(series, "sum", 0, 100_000)
    assert [(t, v) for t, v in got] == [(t, v) for t, v, _ in want]


# ------------------------------------------------------------------ differential


def _series_strategy(int_values: bool):
    value = (
        st.integers(-(2**40), 2**40)
        if int_values
        else st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
    )
    points = st.lists(st.tuples(st.integers(1, 60), value), max_size=8, unique_by=lambda p: p[0])
    return points.map(lambda ps: sorted((t * 250, v) for t, v in ps))


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=300, deadline=None)
@given(
    series=st.lists(st.one_of(_series_strategy(True), _series_strategy(False)), min_size=1,
                    max_size=5),
    name=st.sampled_from([n for n in AGGREGATOR_NAMES if n != "none"]),
    start=st.integers(0, 4000),
    end=st.integers(4000, 16000),
    rate=st.booleans(),
)  # fmt: skip
def test_matches_scalar_reference(series, name, start, end, rate):
    if rate:
        series = [[(t, float(v)) for t, v in s] for s in series]
    try:
        want = ref.aggregate(series, name, start, end, rate=rate)
    except ValueError:
        with pytest.raises(TsdError):
            run(series, name, start, end, rate)
        return
    result = aggregate_series(make_batch(_columns(series)), name, start_ms=start, end_ms=end,
                              rate=rate)  # fmt: skip
    got = [(t, v, bool(result.is_int[i]) if result.is_int is not None else False)
           for i, (t, v) in enumerate(result.points())]  # fmt: skip
    assert _same(got, want)


def _same(got: Sequence[tuple[int, Any, bool]], want: Sequence[tuple[int, Any, bool]]) -> bool:
    if len(got) != len(want):
        return False
    for (t1, v1, i1), (t2, v2, i2) in zip(got, want, strict=True):
        if t1 != t2 or i1 != i2:
            return False
        if isinstance(v1, float) and isinstance(v2, float) and math.isnan(v1) and math.isnan(v2):
            continue
        if v1 != v2 or type(v1) is not type(v2):
            return False
    return True


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=200, deadline=None)
@given(
    times=st.lists(st.integers(1, 60), min_size=1, max_size=8, unique=True).map(sorted),
    data=st.data(),
    name=st.sampled_from([n for n in AGGREGATOR_NAMES if n != "none"]),
    end=st.integers(0, 16000),
    rate=st.booleans(),
)
def test_aligned_series_match_scalar_reference(
    times: list[int], data: st.DataObject, name: str, end: int, rate: bool
) -> None:
    # Series sharing every timestamp take a shortcut (no interpolation); same answers.
    value = st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
    count = data.draw(st.integers(1, 4))
    series = [[(t * 250, data.draw(value)) for t in times] for _ in range(count)]
    if rate:
        series = [[(t, float(v)) for t, v in s] for s in series]
    want = ref.aggregate(series, name, 0, end, rate=rate)
    result = aggregate_series(make_batch(_columns(series)), name, start_ms=0, end_ms=end, rate=rate)
    got = [
        (t, v, bool(result.is_int[i]) if result.is_int is not None else False)
        for i, (t, v) in enumerate(result.points())
    ]
    assert _same(got, want)


H = 3_600_000
T = 1_356_998_400_000  # an hour boundary (2013-01-01T00:00Z)


@pytest.mark.parametrize(
    ("start", "end", "downsample", "expected"),
    [
        # TsdbQuery.getScanEndTimeSeconds: without downsampling, always the next hour.
        pytest.param(T, T + H, None, (T, T + 2 * H), id="raw_end_on_hour"),
        pytest.param(T + 10_000, T + H - 2_000, None, (T, T + H), id="raw_inside_hour"),
        # The end is pushed one second first, so hh:59:59 reaches into the next hour.
        pytest.param(T + 10_000, T + H - 1_000, None, (T, T + 2 * H), id="raw_last_second"),
        # With downsampling an aligned end gets one more interval, then the next hour.
        pytest.param(T + 10_000, T + H - 1_000, "1m-avg", (T, T + 2 * H), id="end_at_minute"),
        pytest.param(T + 10_000, T + H - 60_000, "1m-avg", (T, T + H), id="end_inside_minute"),
        # Intervals align to the UTC epoch first (a day here), then to the hour.
        pytest.param(T + 5 * H, T + 6 * H, "1d-avg", (T, T + 24 * H), id="day_interval"),
        pytest.param(T + 5 * H, T + 6 * H, "0all-sum", (T + 5 * H, T + 7 * H), id="all"),
    ],
)
def test_engine_window_is_the_scan_window_in_ms(
    start: int, end: int, downsample: str | None, expected: tuple[int, int]
) -> None:
    spec = parse_downsample(downsample) if downsample else None
    assert window_ms(start, end, spec) == expected


def window_ms(start_ms: int, end_ms: int, spec: DownsampleSpec | None) -> tuple[int, int]:
    """The window the engine passes to aggregate_group: the scan window, in ms."""
    start_s, end_s = scan_window_s(start_ms, end_ms, spec)
    return start_s * 1000, end_s * 1000


PIPELINE_SPECS = [None, "1m-avg", "1m-sum-nan", "2m-max-zero", "1mc-last", "0all-sum"]


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=150, deadline=None)
@given(
    series=st.lists(_series_strategy(False), min_size=1, max_size=4),
    name=st.sampled_from([n for n in AGGREGATOR_NAMES if n != "none"]),
    downsample=st.sampled_from(PIPELINE_SPECS),
    rate=st.booleans(),
    counter=st.booleans(),
)
def test_group_pipeline_matches_scalar_reference(
    series: list[list[Point]], name: str, downsample: str | None, rate: bool, counter: bool
) -> None:
    # downsample -> rate -> aggregate, with the windows OpenTSDB would use.
    base = 1_356_998_400_000
    series = [[(base + t * 100, v) for t, v in s] for s in series]
    qstart, qend = base + 1_000, base + 14_000
    spec = parse_downsample(downsample) if downsample else None
    start, end = window_ms(qstart, qend, spec)
    options = RateOptions(counter=counter) if rate else None
    try:
        want = ref.group(series, name, start=start, end=end, qstart=qstart, qend=qend,
                         spec=spec, rate_options=options)  # fmt: skip
    except ValueError:
        return
    result = aggregate_group(
        make_batch(_columns(series)), name, start_ms=start, end_ms=end, query_start_ms=qstart,
        query_end_ms=qend, downsample_spec=spec, rate=rate, rate_options=options,
    )  # fmt: skip
    got = [
        (t, v, bool(result.is_int[i]) if result.is_int is not None else False)
        for i, (t, v) in enumerate(result.points())
    ]
    assert _same(got, want)


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=200, deadline=None)
@given(
    series=st.lists(st.one_of(_series_strategy(True), _series_strategy(False)), min_size=1,
                    max_size=5),
    name=st.sampled_from(AGGREGATOR_NAMES),
    downsample=st.sampled_from(PIPELINE_SPECS),
    rate=st.booleans(),
    counter=st.booleans(),
    end=st.integers(4_000, 16_000),
    trim=st.booleans(),
)  # fmt: skip
def test_each_series_alone_is_its_own_group(
    series: list[list[Point]], name: str, downsample: str | None, rate: bool, counter: bool,
    end: int, trim: bool,
) -> None:  # fmt: skip
    # aggregate_each (a group-by where every series is its own group) answers what
    # aggregate_group answers for each series alone: points, values, integer or double.
    base = 1_356_998_400_000
    series = [[(base + t * 100, v) for t, v in s] for s in series]
    qstart, qend = base + 1_000, base + end
    spec = parse_downsample(downsample) if downsample else None
    start, stop = window_ms(qstart, qend, spec)
    options = RateOptions(counter=counter) if rate else None
    batch = make_batch(_columns(series))
    kwargs: dict[str, Any] = dict(
        start_ms=start, end_ms=stop, query_start_ms=qstart, query_end_ms=qend,
        downsample_spec=spec, rate=rate, rate_options=options,
    )  # fmt: skip
    want: list[Any] = []
    for s in range(len(series)):
        try:
            alone = aggregate_group(batch.select_series([s]), name, **kwargs)
            want.append(_typed_points(alone.trim(qstart, qend) if trim else alone))
        except TsdError as exc:
            want.append(type(exc))
    if any(isinstance(w, type) for w in want):
        with pytest.raises(TsdError) as raised:
            aggregate_each(batch, name, **kwargs)
        if len(series) == 1:  # one series alone (a raw query's): OpenTSDB's very message
            with pytest.raises(TsdError, match=re.escape(str(raised.value))):
                aggregate_group(batch, name, **kwargs)
        return
    bounds = (qstart, qend) if trim else None
    got = [_typed_points(r) for r in aggregate_each(batch, name, bounds, **kwargs)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert _same(g, w)
    # the engine aggregates a group-by in chunks and joins them (JoinedSeries.concat)
    cut = len(series) // 2
    halves = [
        aggregate_each_joined(batch.select_series(list(part)), name, bounds, **kwargs)
        for part in (range(cut), range(cut, len(series)))
    ]
    joined = JoinedSeries.concat(halves)
    assert len(joined) == len(series)
    for g, w in zip([_typed_points(r) for r in joined.split()], want, strict=True):
        assert _same(g, w)


def _typed_points(result: Any) -> list[tuple[int, Any, bool]]:
    return [
        (t, v, bool(result.is_int[i]) if result.is_int is not None else False)
        for i, (t, v) in enumerate(result.points())
    ]


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=30),
    present=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_none_over_one_series_is_its_row(values: list[float], present: list[bool]) -> None:
    # A block of one row (one series: a raw query) is given back as it is; it is what
    # the general path (checked for single values, the first one picked) answers.
    from tsd.query import reducers

    x = np.array([values], dtype=np.float64)
    m = np.array([present[: len(values)]], dtype=np.bool_)
    ints = np.array([[int(v) % 1000 if math.isfinite(v) else 7 for v in values]], dtype=np.int64)
    got_d, got_l = reducers.run_double("none", x, m), reducers.run_long("none", ints, m)
    assert got_d.dtype == np.float64
    assert got_l.dtype == np.int64
    assert np.array_equal(got_d, reducers._first_d(x, m), equal_nan=True)
    assert np.array_equal(got_l, reducers._first_l(ints, m))
    assert got_d.base is not x  # copies, not views
    assert got_l.base is not ints
