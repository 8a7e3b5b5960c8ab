"""Which tables a downsampled sub-query reads, in which order (tsd/query/rollup.py;
OpenTSDB 2.4.1 TsdbQuery.transformDownSamplerToRollupQuery, FallbackRollupOnEmptyResult,
RollupConfig.getRollupInterval(long, String))."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from tsd.protocol.rollup_config import parse_rollup_config
from tsd.query.rollup import plan_reads
from tsd.query_spec import DownsampleSpec, SubQuery

CONFIG = parse_rollup_config(
    orjson.dumps(
        {
            "aggregationIds": {"sum": 0, "count": 1, "max": 2},
            "intervals": [
                {"table": "raw", "preAggregationTable": "agg", "interval": "1m",
                 "rowSpan": "1h", "defaultInterval": True},
                {"table": "r10m", "preAggregationTable": "a10m", "interval": "10m",
                 "rowSpan": "6h"},
                {"table": "r1h", "preAggregationTable": "a1h", "interval": "1h", "rowSpan": "1d"},
            ],
        }
    )
)  # fmt: skip


def sub(spec: str | None, usage: str | None = None, pre_agg: bool = False) -> SubQuery:
    downsample = None
    if spec is not None:
        amount, function = spec.split("-")
        seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}[amount[-1]] * int(amount[:-1])
        downsample = DownsampleSpec(spec, seconds * 1000, function)
    return SubQuery(
        "sum", "m", downsample_spec=downsample, rollup_usage=usage, pre_aggregate=pre_agg
    )


def tables(q: SubQuery) -> list[tuple[str, str]]:
    return [(r.table, r.name) for r in plan_reads(CONFIG, q, "tsdb")]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (sub(None), [("tsdb", "raw")]),
        (sub("1h-sum"), [("r1h", "1h")]),
        (sub("2h-max"), [("r1h", "1h")]),
        (sub("30m-sum"), [("r10m", "10m")]),
        (sub("1m-sum"), [("tsdb", "raw")]),  # the default interval is raw data
        (sub("90s-sum"), [("tsdb", "raw")]),  # none divides it
        (sub("1h-sum", "ROLLUP_RAW"), [("tsdb", "raw")]),
        (sub("1h-sum", "ROLLUP_NOFALLBACK"), [("r1h", "1h")]),
        (sub("1h-sum", "ROLLUP_FALLBACK"), [("r1h", "1h"), ("r10m", "10m"), ("tsdb", "raw")]),
        (sub("1h-sum", "ROLLUP_FALLBACK_RAW"), [("r1h", "1h"), ("tsdb", "raw")]),
        (sub("1h-sum", pre_agg=True), [("a1h", "1h")]),
        (sub(None, pre_agg=True), [("agg", "raw")]),
        (sub("1h-zimsum"), [("r1h", "1h")]),
    ],
)
def test_reads(q: SubQuery, expected: list[tuple[str, str]]) -> None:
    assert tables(q) == expected


def test_columns() -> None:
    (avg,) = plan_reads(CONFIG, sub("1h-avg"), "tsdb")
    assert (avg.agg_id, avg.count_id, avg.bucket_ms) == (0, 1, 3_600_000)
    (mimmax,) = plan_reads(CONFIG, sub("1h-mimmax"), "tsdb")
    assert (mimmax.aggregator, mimmax.agg_id) == ("max", 2)
    count = plan_reads(CONFIG, sub("1h-count"), "tsdb")[0]
    spec = sub("1h-count").downsample_spec
    assert spec is not None
    assert count.engine_spec(spec) == dataclasses.replace(spec, function="sum")


def test_scan_window_covers_whole_rollup_rows() -> None:
    (read,) = plan_reads(CONFIG, sub("1h-sum"), "tsdb")
    day = 1356998400
    assert read.scan_window_s((day + 5000) * 1000, (day + 7000) * 1000, rate=False) == (
        day,
        day + 86400,  # exclusive: the row after the end's
    )
    assert read.scan_window_s((day + 5000) * 1000, (day + 7000) * 1000, rate=True)[0] == day - 86400
