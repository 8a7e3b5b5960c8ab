"""A group-by's result series by column (tsd.query.output.SeriesColumns) render as the
same series one by one (SeriesResult, the spec) render: the same bytes for any range of
them, beside other sub-queries' series, whatever the query's options."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.protocol.query_json import parse_query_params
from tsd.query.output import QueryResult, SeriesColumns, SeriesParts, SeriesResult, emitted_points
from tsd.query.series import AggregatedSeries, JoinedSeries
from tsd.server.http import render

NAMES = ["host", "dc", "rack", 'we"ird']
VALUES = ["h0", "h1", "dc/1", "r\u00e9", 'q"uote', "x"]


def _columns(
    sub_index: int, query: object, n_series: int, n_tags: int, rng: np.random.Generator, ints: bool
) -> SeriesColumns:
    names = sorted(NAMES[:n_tags])
    inverse = {name: rng.integers(0, len(VALUES), n_series).astype(np.int64) for name in names}
    columns = {name: (list(VALUES), inverse[name]) for name in names}
    tags = [{name: VALUES[int(inverse[name][i])] for name in names} for i in range(n_series)]
    tsuids = [f"{i:06X}" for i in range(n_series)]
    members = np.sort(rng.choice(n_series, size=max(1, n_series // 2), replace=False))
    counts = rng.integers(0, 5, len(members))
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    total = int(offsets[-1])
    ts = 1356998400_000 + 60_000 * (np.arange(total) - np.repeat(offsets[:-1], counts))
    values = np.round(rng.normal(50, 10, total), 2)
    if total:
        values[rng.integers(0, total)] = math.nan
    dps = AggregatedSeries(ts.astype(np.int64), values)
    if ints and total:
        is_int = rng.random(total) < 0.5
        dps = AggregatedSeries(dps.timestamps, values, rng.integers(-99, 99, total), is_int)
    sub = query.queries[sub_index]  # type: ignore[attr-defined]
    timings = {"aggregationTime": 1.5}
    return SeriesColumns(
        sub, "m.x", members, JoinedSeries(dps, offsets), tags, tsuids, columns, timings, ()
    )


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_tags=st.integers(0, 3),
    ints=st.booleans(),
    arrays=st.booleans(),
    option=st.sampled_from(["", "showTSUIDs", "showQuery", "showStats", "msResolution"]),
    fill=st.sampled_from(["", "-null", "-nan"]),
)
def test_columns_render_as_their_series_one_by_one(
    seed: int, n_tags: int, ints: bool, arrays: bool, option: str, fill: str
) -> None:
    rng = np.random.default_rng(seed)
    params = {"start": ["1356998400"], "m": [f"sum:1m-avg{fill}:m.x", "sum:m.y"]}
    if option:
        params[option] = ["true"]
    query = parse_query_params(params)
    # up to 40 members: a few (tag texts one by one) and more (by distinct value)
    columns = _columns(0, query, int(rng.integers(1, 80)), n_tags, rng, ints)
    other = SeriesResult(
        query.queries[1],
        "m.y",
        {"a": "b"},
        [],
        AggregatedSeries(np.array([1356998400_000]), np.ones(1)),
    )
    parts = SeriesParts([columns, [other]])
    plain = [*list(columns), other]
    assert len(parts) == len(plain)
    assert emitted_points(parts) == emitted_points(plain)
    whole = QueryResult(query, parts)
    spec = QueryResult(query, plain)
    for lo, hi in ((0, len(plain)), (0, 1), (1, len(plain)), (len(plain) // 2, len(plain))):
        got = render.render_series_range(whole, lo, hi, arrays)
        want = render.render_series_range(spec, lo, hi, arrays)
        assert got == want
    body = render.render_query_result(whole, arrays=arrays)
    assert body == render.render_query_result(spec, arrays=arrays)
    assert len(orjson.loads(body)) == len(plain)


def test_columns_read_as_series_results() -> None:
    query = parse_query_params({"start": ["1356998400"], "m": ["sum:m.x{host=*}"]})
    columns = _columns(0, query, 12, 2, np.random.default_rng(4), True)
    results = list(columns)
    assert [r.tags for r in results] == [dict(columns.tags[int(i)]) for i in columns.members]
    assert [r.tsuids for r in results] == [[columns.tsuids[int(i)]] for i in columns.members]
    assert columns[-1].dps.timestamps.tolist() == results[-1].dps.timestamps.tolist()
    assert [r.tags for r in columns[2:5]] == [r.tags for r in results[2:5]]
    assert sum(len(r.dps) for r in results) == columns.point_count()
    with pytest.raises(IndexError):
        columns[len(results)]


@pytest.mark.skipif(render._C is None, reason="the compiled helper is not built")
def test_a_dashboards_group_by_is_written_from_the_columns() -> None:
    query = parse_query_params({"start": ["1356998400"], "m": ["sum:1m-avg:m.x{host=*}"]})
    columns = _columns(0, query, 20, 1, np.random.default_rng(5), False)
    result = QueryResult(query, SeriesParts([columns]))
    body = render._columns_json(columns, result, False)
    assert body is not None
    assert body == render.render_series_range(QueryResult(query, list(columns)), 0, len(columns))
