"""The completed-query list is bounded in bytes (issue 25, held-out abuse): twenty distinct
multi-megabyte queries used to stay whole in /api/stats/query (+521 MB, a 76 MB answer)."""

from __future__ import annotations

import io

import aiohttp
import orjson
import pytest

from tsd.daemon import Daemon
from tsd.query.tracking import (
    COMPLETED_QUERY_BYTES,
    MAX_TRACKED_QUERY_BYTES,
    QueryTracker,
)

T = 1700000000


def _big_query(i: int, values: int) -> bytes:
    literals = "|".join(f"q{i}v{v:07d}" for v in range(values))  # about 12 bytes a value
    sub = {
        "aggregator": "sum",
        "metric": "stats.m",
        "filters": [{"type": "literal_or", "tagk": "host", "filter": literals}],
    }
    return orjson.dumps({"start": T - 10, "end": T + 10, "queries": [sub]})


@pytest.mark.slow
async def test_completed_queries_are_bounded_in_bytes(tsd: Daemon) -> None:
    base = f"http://127.0.0.1:{tsd.port}"
    point = {"metric": "stats.m", "timestamp": T, "value": 1, "tags": {"host": "a"}}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/api/put?sync", json=point) as resp:
            assert resp.status == 204
        for i in range(20):  # twenty distinct 200 KB queries (the finding: 4 MB each)
            body = _big_query(i, 19_000)
            assert len(body) > 3 * MAX_TRACKED_QUERY_BYTES
            async with http.post(f"{base}/api/query", data=io.BytesIO(body)) as resp:
                await resp.read()
        small = f"{base}/api/query?start={T - 10}&end={T + 10}&m=sum:stats.m"
        async with http.get(small) as resp:
            assert resp.status == 200
        async with http.get(f"{base}/api/stats/query") as resp:
            raw = await resp.read()
    stats = orjson.loads(raw)
    assert len(stats["completed"]) == 21
    assert len(raw) < 21 * (MAX_TRACKED_QUERY_BYTES // 10)  # the answer: kilobytes, not 4 MB
    truncated = [e["query"] for e in stats["completed"] if "truncated" in e["query"]]
    assert len(truncated) == 20
    for query in truncated:
        assert query["start"] == str(T - 10)
        assert "the query's JSON is" in query["truncated"]
        assert "queries" not in query
    whole = [e["query"] for e in stats["completed"] if "truncated" not in e["query"]]
    assert whole[0]["queries"][0]["metric"] == "stats.m"  # a dashboard's query: whole


def test_the_total_is_bounded_and_the_oldest_go_first() -> None:
    tracker = QueryTracker(completed_bytes=10 * MAX_TRACKED_QUERY_BYTES)
    filler = "x" * (MAX_TRACKED_QUERY_BYTES - 200)  # each query kept whole, about 64 KB
    for i in range(40):
        tracked = tracker.start("127.0.0.1:1", {"start": str(i), "note": filler}, {})
        tracker.finish(tracked, 200)
        assert tracker.completed_bytes <= 10 * MAX_TRACKED_QUERY_BYTES
    completed = tracker.snapshot()["completed"]
    starts = [orjson.loads(orjson.dumps(e["query"]))["start"] for e in completed]
    assert starts == [str(i) for i in range(30, 40)]  # the newest ten fit
    assert COMPLETED_QUERY_BYTES >= 64 * MAX_TRACKED_QUERY_BYTES  # room for 64 whole ones


def test_the_same_query_again_bumps_executed() -> None:
    tracker = QueryTracker()
    for remote in ("a", "a", "b"):
        tracked = tracker.start(remote, {"start": "1h-ago", "queries": [{"metric": "m"}]}, {})
        tracker.finish(tracked, 200)
    completed = tracker.snapshot()["completed"]
    assert [e["executed"] for e in completed] == [2, 1]
