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
def test_values_not_one_per_timestamp_are_left_to_the_python_path() -> None:
    ts = np.array([1, 2, 3], dtype=np.int64)
    assert _C.dps_json(ts, b"1.0,2.0", False) is None
    assert _C.dps_json(ts, b"1.0,2.0,3.0,4.0", True) is None
    assert _C.dps_json(ts, b"", True) is None
    assert _C.dps_json(ts, b"1.5,-2,null", False) == dps_json_python(ts, b"1.5,-2,null", False)
    with pytest.raises(ValueError, match="zip"):
        dps_json_python(ts, b"1.0,2.0", False)
