"""tsd's own rollups (tsd.rollups.compute) answer as the raw data does.

Random points through the real write path (ingest, writer, head, write-out with its
rollup hook) on a real embedded store, in batches, with late points for hours already
written out (their row-hour recomputed from the merged row) and points still in the head
(rolled up as they are read). Each check asks the same downsampled query three ways: raw
(``ROLLUP_RAW``), transparently (no ``rollupUsage``: tsd picks its rollups) and from the
rollups alone (``ROLLUP_NOFALLBACK``); all three must agree. Sums of doubles over buckets
longer than a rollup interval are associated differently (a sum of interval sums), so
those are compared to 1e-12; everything else exactly.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.query.tsdb_harness import QueryHarness, embedded_harness
from tsd.protocol.query_json import parse_query_json
from tsd.protocol.rollup_config import default_rollup_config, parse_rollup_config
from tsd.query import reader
from tsd.query.rollup import plan_reads
from tsd.storage.base import ScanSpec

T0 = 1356998400  # 2013-01-01 00:00:00 UTC, a day boundary
CONFIG = parse_rollup_config(
    orjson.dumps(
        {
            "aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
            "intervals": [
                {"table": "tsdb", "preAggregationTable": "tsdb-agg", "interval": "1m",
                 "rowSpan": "1h", "defaultInterval": True},
                {"table": "tsdb-rollup-10m", "preAggregationTable": "tsdb-agg-10m",
                 "interval": "10m", "rowSpan": "6h"},
                {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-agg-1h",
                 "interval": "1h", "rowSpan": "1d"},
            ],
        }
    )
)  # fmt: skip
VALUES: list[int | float] = [0, 1, -1, 7, 300, -70_000, 2**40, 0.5, 1.5, -2.25, 0.1, 1 / 3]
INTERVALS = ["10m", "1h", "20m", "2h", "6h", "1d", "3h"]
FUNCTIONS = ["sum", "count", "min", "max", "avg", "zimsum", "mimmax", "mimmin"]

Point = tuple[str, dict[str, str], int, Any]


@st.composite
def _points(draw: st.DrawFn) -> list[Point]:
    """1-30 points of three series over three days, crowded on a few hours and seconds
    so that buckets hold several points and duplicates happen; some in milliseconds."""
    points = []
    for _ in range(draw(st.integers(1, 30))):
        hour = draw(st.sampled_from([0, 1, 5, 23, 24, 30, 71]))
        second = T0 + hour * 3600 + draw(st.sampled_from([0, 1, 59, 600, 601, 1800, 3599]))
        timestamp = second * 1000 + 250 if draw(st.integers(0, 4)) == 0 else second
        host = draw(st.sampled_from("abc"))
        points.append(("m", {"host": host}, timestamp, draw(st.sampled_from(VALUES))))
    return points


def _body(downsample: str, aggregator: str, usage: str | None) -> dict[str, Any]:
    sub: dict[str, Any] = {
        "aggregator": aggregator,
        "metric": "m",
        "downsample": downsample,
        "tags": {"host": "*"} if aggregator == "none" else {},
    }
    if usage is not None:
        sub["rollupUsage"] = usage
    return {"start": T0, "end": T0 + 3 * 86400, "queries": [sub]}


def _same(raw: Any, other: Any, exact: bool) -> bool:
    if exact:
        return bool(raw == other)
    if len(raw) != len(other):
        return False
    for a, b in zip(raw, other, strict=True):
        if a["tags"] != b["tags"] or a["dps"].keys() != b["dps"].keys():
            return False
        for t, v in a["dps"].items():
            if not math.isclose(v, b["dps"][t], rel_tol=1e-12, abs_tol=1e-9):
                return False
    return True


async def _check(harness: QueryHarness, queries: list[tuple[str, str, str]]) -> None:
    for downsample, function, aggregator in queries:
        spec = f"{downsample}-{function}"
        raw = await harness.query(body=_body(spec, aggregator, "ROLLUP_RAW"))
        # every query here reads the rollups without rollupUsage (then raw if none found)
        sub = parse_query_json(orjson.dumps(_body(spec, aggregator, None))).queries[0]
        engine = harness.engine
        reads = plan_reads(engine.rollups, sub, "tsdb", engine.computed)
        assert [r.is_rollup for r in reads] == [True, False]
        transparent = await harness.query(body=_body(spec, aggregator, None))
        exact = downsample in ("10m", "1h") or function not in ("sum", "zimsum", "avg")
        assert _same(raw, transparent, exact), (spec, aggregator, raw, transparent)
        if downsample in ("10m", "1h", "2h", "3h", "6h", "1d") and function != "avg":
            rolled = await harness.query(body=_body(spec, aggregator, "ROLLUP_NOFALLBACK"))
            assert _same(raw, rolled, exact), (spec, aggregator, raw, rolled)


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(_points(), min_size=1, max_size=3),
    queries=st.lists(
        st.tuples(
            st.sampled_from(INTERVALS), st.sampled_from(FUNCTIONS), st.sampled_from(["sum", "none"])
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_rollups_answer_as_raw_data(
    tmp_path: Path, writes: list[list[Point]], queries: list[tuple[str, str, str]]
) -> None:
    asyncio.run(_differential(tmp_path / uuid.uuid4().hex, writes, queries))


async def _differential(
    directory: Path, writes: list[list[Point]], queries: list[tuple[str, str, str]]
) -> None:
    async with embedded_harness(
        directory, storage_options={"fix_duplicates": True}, rollups=CONFIG
    ) as harness:
        assert harness.head is not None
        for points in writes:
            await harness.load(points)  # in the head (late ones beside stored rows)
            await _check(harness, queries)
            await harness.write_out()
            assert not len(harness.head.head)
            await _check(harness, queries)


def test_the_default_configuration_rolls_up_hours(tmp_path: Path) -> None:
    """docs/rollups.md's default: hourly cells in tsdb-rollup-1h, read by a 1h-avg."""

    async def run() -> None:
        async with embedded_harness(
            tmp_path / "db", rollups=default_rollup_config("tsdb")
        ) as harness:
            points = [("m", {"host": "a"}, T0 + i * 60, i) for i in range(180)]
            await harness.load(points)
            await harness.write_out()
            rows = [r async for r in harness.storage.scan("tsdb-rollup-1h", ScanSpec())]
            assert len(rows) == 1
            assert len(rows[0].cells) == 3 * 4  # three hours, four columns
            raw = await harness.query(body=_body("1h-avg", "sum", "ROLLUP_RAW"))
            rolled = await harness.query(body=_body("1h-avg", "sum", "ROLLUP_NOFALLBACK"))
            assert raw == rolled
            assert list(raw[0]["dps"].values()) == [29.5, 89.5, 149.5]

    asyncio.run(run())


def test_head_rows_read_as_rollup_buckets(tmp_path: Path) -> None:
    # The dashboard's query, an avg at the rollup interval, reads the head's rows through
    # the bucket kernels (tsd/query/head_buckets.py): still the raw answer, before and after
    # the write-out, also with a late point beside a stored row and points in ms.
    first: list[Point] = [
        ("m", {"host": h}, (T0 + hour * 3600 + s) * 1000 + ms, v)
        for h in "ab"
        for hour in (0, 1, 25)
        for s, ms, v in ((0, 0, 1), (59, 0, 0.5), (600, 250, 7), (3599, 0, 1 / 3))
    ]
    late: list[Point] = [("m", {"host": "a"}, T0 + 1800, 300), ("m", {"host": "c"}, T0 + 7, 2.25)]
    queries = [("1h", "avg", "sum"), ("10m", "avg", "none"), ("1h", "avg", "none")]
    asyncio.run(_differential(tmp_path / "d", [first, late], queries))


def test_head_rows_found_stored_by_a_key_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many head rows (30 days of a dashboard's panel) are matched with their stored rows
    # by a key-only scan of the hours they span, not a lookup each: the same answers,
    # late points beside stored rows included.
    monkeypatch.setattr(reader, "STORED_LOOKUPS", 0)
    test_head_rows_read_as_rollup_buckets(tmp_path)
