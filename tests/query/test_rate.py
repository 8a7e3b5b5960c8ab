"""Rate: per-second rates, counters, counterMax, resetValue, dropResets (RateSpan.java)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.query import scalar_reference as ref
from tests.query.scalar_reference import Point
from tsd.errors import TsdError
from tsd.protocol.m_syntax import parse_downsample, parse_m_subquery
from tsd.query.aggregate import aggregate_group
from tsd.query.rate import rate
from tsd.query.series import make_batch
from tsd.query_spec import LONG_MAX, RateOptions

S = 1000  # one second in ms


def run(series: Sequence[Point], options: RateOptions) -> list[tuple[int, float]]:
    out = rate(make_batch([([t for t, _ in series], [v for _, v in series])]), options)
    assert out.is_int is None  # rates are always doubles
    ts, vs = out.series(0)
    return list(zip(ts.tolist(), vs.tolist(), strict=True))


COUNTER = RateOptions(counter=True)
# RateSpan.populateNextRate; the first rate is taken against (t=0, v=0).
CASES = [
    pytest.param([(10 * S, 100), (20 * S, 200), (30 * S, 250)], RateOptions(),
                 [(10 * S, 10.0), (20 * S, 10.0), (30 * S, 5.0)], id="per_second"),
    pytest.param([(1500, 1.5), (2000, 3.0)], RateOptions(), [(1500, 1.0), (2000, 3.0)],
                 id="milliseconds"),
    # Two integers subtract as longs: 2**60 + 3 - (2**60 + 1) = 2, which doubles lose.
    pytest.param([(S, 2**60 + 1), (2 * S, 2**60 + 3)], RateOptions(),
                 [(S, float(2**60 + 1)), (2 * S, 2.0)], id="long_subtraction"),
    pytest.param([(S, 10), (2 * S, 4)], RateOptions(), [(S, 10.0), (2 * S, -6.0)],
                 id="negative_rate_without_counter"),
    # counterMax - prev + next over the interval.
    pytest.param([(S, 900), (11 * S, 100)], RateOptions(counter=True, counter_max=1000),
                 [(S, 900.0), (11 * S, 20.0)], id="counter_wraps_at_counter_max"),
    pytest.param([(S, 9), (2 * S, 1)], COUNTER, [(S, 9.0), (2 * S, float(LONG_MAX - 8))],
                 id="counter_default_max_is_long_max"),
    # A wrapped rate above resetValue becomes 0.
    pytest.param([(S, 900), (2 * S, 100)],
                 RateOptions(counter=True, counter_max=1000, reset_value=100),
                 [(S, 900.0), (2 * S, 0.0)], id="reset_value_zeroes"),
    pytest.param([(S, 900), (2 * S, 100), (3 * S, 150)],
                 RateOptions(counter=True, drop_resets=True),
                 [(S, 900.0), (3 * S, 50.0)], id="drop_resets"),
    pytest.param([(S, 2.0), (2 * S, math.nan), (3 * S, 5.0)], COUNTER,
                 [(S, 2.0), (2 * S, "NaN"), (3 * S, "NaN")], id="nan_propagates"),
]  # fmt: skip


@pytest.mark.parametrize(("series", "options", "expected"), CASES)
def test_rates_like_opentsdb(
    series: list[Point], options: RateOptions, expected: list[tuple[int, object]]
) -> None:
    got = [(t, "NaN" if math.isnan(v) else v) for t, v in run(series, options)]
    assert got == expected


def test_timestamps_must_increase() -> None:
    with pytest.raises(TsdError, match="strictly greater"):
        run([(2 * S, 1), (2 * S, 2)], RateOptions())


def test_the_first_rate_is_never_emitted_by_the_aggregation() -> None:
    # AggregationIterator preloads each series' first rate; only later ones are emitted.
    batch = make_batch([([10 * S, 20 * S, 30 * S], [100, 200, 250])])
    sub = parse_m_subquery("sum:rate:m")
    got = aggregate_group(batch, "sum", start_ms=0, end_ms=40 * S, query_start_ms=0,
                          query_end_ms=40 * S, rate=sub.rate)  # fmt: skip
    assert got.points() == [(20 * S, 10.0), (30 * S, 5.0)]


def test_rate_runs_after_downsampling() -> None:
    # Pipeline order (TsdbQuery/SpanGroup): downsample, then rate, then aggregate.
    b = 600 * S
    batch = make_batch([([b, b + 30 * S, b + 60 * S, b + 90 * S], [0, 60, 120, 180])])
    got = aggregate_group(batch, "sum", start_ms=b, end_ms=b + 120 * S, query_start_ms=b,
                          query_end_ms=b + 120 * S, downsample_spec=parse_downsample("1m-avg"),
                          rate=True)  # fmt: skip
    # Buckets: b -> 30.0, b + 60 s -> 150.0; rate (150 - 30) / 60 = 2.0 at b + 60 s.
    assert got.points() == [(b + 60 * S, 2.0)]


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(max_examples=200, deadline=None)
@given(
    series=st.lists(
        st.tuples(st.integers(1, 500),
                  st.one_of(st.integers(-(2**62), 2**62), st.floats(-1e9, 1e9))),
        max_size=10, unique_by=lambda p: p[0],
    ).map(lambda ps: sorted((t * 250, v) for t, v in ps)),
    counter=st.booleans(),
    counter_max=st.one_of(st.just(LONG_MAX), st.integers(0, 2**40)),
    reset_value=st.one_of(st.just(0), st.integers(1, 10**6)),
    drop_resets=st.booleans(),
)  # fmt: skip
def test_matches_scalar_reference(
    series: list[Point], counter: bool, counter_max: int, reset_value: int, drop_resets: bool
) -> None:
    options = RateOptions(counter, counter_max, reset_value, drop_resets)
    assert run(series, options) == ref.rate(series, options)
