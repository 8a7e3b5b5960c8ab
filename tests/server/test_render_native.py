"""The compiled point writer (tsd/server/http/_render.c) writes what its spec, render.py's
Python path, writes: every point's timestamp and value text, as an object or as pairs."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tsd.query.series import AggregatedSeries
from tsd.server.http import render
from tsd.server.http.render import dps_json_python

_C = native.load("tsd.server.http._render")
needs_helper = pytest.mark.skipif(_C is None, reason="the compiled helper is not built")

_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=False),
    st.integers(-(2**63), 2**63 - 1),
)


def _series(stamps: list[int], values: list[float | int]) -> AggregatedSeries:
    ints = np.array([isinstance(v, int) for v in values], dtype=np.bool_)
    int_values = np.array([v if isinstance(v, int) else 0 for v in values], dtype=np.int64)
    doubles = np.array([float(v) for v in values], dtype=np.float64)
    if not ints.any():
        return AggregatedSeries(np.array(stamps, dtype=np.int64), doubles)
    return AggregatedSeries(np.array(stamps, dtype=np.int64), doubles, int_values, ints)


@pytest.mark.slow
@needs_helper
@settings(max_examples=300, deadline=None)
@given(
    points=st.lists(st.tuples(st.integers(-(2**62), 2**62), _VALUE), max_size=40),
    ms=st.booleans(),
    arrays=st.booleans(),
    fill_null=st.booleans(),
)
def test_the_helper_writes_what_the_python_path_writes(
    points: list[tuple[int, float | int]], ms: bool, arrays: bool, fill_null: bool
) -> None:
    dps = _series([t for t, _ in points], [v for _, v in points])
    compiled = render._dps_json(dps, ms, arrays, fill_null)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(render, "_C", None)
        python = render._dps_json(dps, ms, arrays, fill_null)
    assert compiled == python


def test_a_day_of_doubles_reads_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # the JSON a client reads: every stamp (seconds) with its value, NaN quoted
    ts = 1356998400_000 + 10_000 * np.arange(8640, dtype=np.int64)
    values = np.round(np.random.default_rng(3).normal(50, 10, 8640), 2)
    values[7] = math.nan
    for helper in (_C, None):
        monkeypatch.setattr(render, "_C", helper)
        body = orjson.loads(render._dps_json(AggregatedSeries(ts, values), False, False, False))
        assert list(body) == [str(t // 1000) for t in ts.tolist()]
        assert body[str(ts[7] // 1000)] == "NaN"
        assert [v for i, v in enumerate(body.values()) if i != 7] == np.delete(values, 7).tolist()
        pairs = orjson.loads(render._dps_json(AggregatedSeries(ts, values), True, True, True))
        assert pairs[7] == [int(ts[7]), None]
        assert pairs[0] == [int(ts[0]), values[0]]


@needs_helper
@needs_helper
def test_every_width_of_timestamp_is_written_as_python_writes_it() -> None:
    """Each power of ten and the number below it, their negatives, and int64's ends: the
    writer's digit count and its pairs of digits."""
    stamps = [0, -(2**63), 2**63 - 1]
    for k in range(1, 19):
        stamps += [10**k - 1, 10**k, -(10**k) + 1, -(10**k)]
    ts = np.array(stamps, dtype=np.int64)
    texts = b",".join(b"%d" % i for i in range(len(stamps)))
    for arrays in (False, True):
        assert _C.dps_json(ts, texts, arrays) == dps_json_python(ts, texts, arrays)


def test_values_not_one_per_timestamp_are_left_to_the_python_path() -> None:
    ts = np.array([1, 2, 3], dtype=np.int64)
    assert _C.dps_json(ts, b"1.0,2.0", False) is None
    assert _C.dps_json(ts, b"1.0,2.0,3.0,4.0", True) is None
    assert _C.dps_json(ts, b"", True) is None
    assert _C.dps_json(ts, b"1.5,-2,null", False) == dps_json_python(ts, b"1.5,-2,null", False)
    with pytest.raises(ValueError, match="zip"):
        dps_json_python(ts, b"1.0,2.0", False)


@pytest.mark.slow  # a property run of hundreds of examples: the full suite's
@needs_helper
@settings(max_examples=200, deadline=None)
@given(
    series=st.lists(
        st.lists(st.tuples(st.integers(-(2**62), 2**62), _VALUE), max_size=12),
        min_size=render.MANY_SERIES,
        max_size=30,
    ),
    ms=st.booleans(),
    arrays=st.booleans(),
    fill_null=st.booleans(),
)
def test_many_series_at_once_write_what_each_alone_writes(
    series: list[list[tuple[int, float | int]]], ms: bool, arrays: bool, fill_null: bool
) -> None:
    # a group-by's answers in one call of the helper: the bytes of each series rendered
    # alone by the Python path
    parts = [_series([t for t, _ in s], [v for _, v in s]) for s in series]
    joined = render._joined(parts)
    ts = joined.timestamps if ms else joined.timestamps // 1000
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    texts = render._value_texts(joined, fill_null)
    compiled = _C.dps_json_many(ts, texts, counts, arrays)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(render, "_C", None)
        alone = [render._dps_json(p, ms, arrays, fill_null) for p in parts]
    assert compiled == alone


@needs_helper
def test_counts_that_do_not_match_the_values_are_left_to_the_python_path() -> None:
    ts = np.array([1, 2, 3], dtype=np.int64)
    assert _C.dps_json_many(ts, b"1,2,3", np.array([1, 1], dtype=np.int64), False) is None
    assert _C.dps_json_many(ts, b"1,2", np.array([2, 1], dtype=np.int64), False) is None
    assert _C.dps_json_many(ts, b"1,2,3", np.array([4, -1], dtype=np.int64), False) is None
    assert _C.dps_json_many(ts, b"1,2,3", np.array([0, 3, 0], dtype=np.int64), True) == [
        b"[]",
        b"[[1,1],[2,2],[3,3]]",
        b"[]",
    ]


@needs_helper
@pytest.mark.parametrize("arrays", [False, True])
def test_a_wide_answer_renders_as_series_by_series(arrays: bool) -> None:
    # render_series_range over many series (doubles, integers, NaN, empty, nulls of a
    # fill policy): the same bytes with the helper as through the Python path
    from tsd.protocol.query_json import parse_query_params
    from tsd.query.output import QueryResult, SeriesResult

    rng = np.random.default_rng(9)
    for m in ("sum:1m-avg:a{host=*}", "sum:1m-avg-null:a{host=*}", "sum:a{host=*}"):
        query = parse_query_params({"start": ["1356998400"], "m": [m], "msResolution": ["1"]})
        series = []
        for k in range(40):
            n = int(rng.integers(0, 6))
            ts = 1356998400_000 + 60_000 * np.arange(n, dtype=np.int64)
            values = np.round(rng.normal(50, 10, n), 2)
            if k % 7 == 3 and n:
                values[0] = math.nan
            dps = AggregatedSeries(ts, values)
            if k % 5 == 1 and n:
                is_int = np.arange(n) % 2 == 0
                dps = AggregatedSeries(ts, values, np.arange(n, dtype=np.int64) * 3, is_int)
            series.append(SeriesResult(query.queries[0], "a", {"host": f"h{k}"}, [], dps))
        result = QueryResult(query, series)
        compiled = render.render_series_range(result, 0, len(series), arrays)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(render, "_C", None)
            python = render.render_series_range(result, 0, len(series), arrays)
        assert compiled == python
        assert len(orjson.loads(b"[" + compiled + b"]")) == len(series)
