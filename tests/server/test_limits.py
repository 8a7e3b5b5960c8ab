"""Nothing one client does can take the daemon down (issue 13): query limits refused before
work starts, cancellation on disconnect and on shutdown, the regexp budget, internals kept
out of 500s, bounded caches and connection timeouts. Real daemon, real sockets; each test
asserts the mechanism (a stat counter, the engine's state), never a timing."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import structlog

from tests.server.conftest import MakeTsd
from tests.server.support import eventually, non_reader
from tsd.daemon import Daemon
from tsd.query.engine import QueryEngine
from tsd.server.http import ui
from tsd.server.http.context import ROUTES
from tsd.server.http.routing import ApiPath

T0 = 1700000000
#: A value on which ``(a|aa)+$`` backtracks exponentially (each match hits its 1 s cap).
SLOW_VALUE = "a" * 60 + "-"
SLOW_FILTER = [{"type": "regexp", "tagk": "host", "filter": "(a|aa)+$"}]


def engine_of(daemon: Daemon) -> QueryEngine:
    engine = daemon._query_engine
    assert isinstance(engine, QueryEngine)
    return engine


async def put(daemon: Daemon, points: list[dict[str, Any]]) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=points) as resp,
    ):
        assert resp.status == 204, await resp.text()


async def get(daemon: Daemon, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{daemon.port}{path}") as resp,
    ):
        return resp.status, await resp.json(content_type=None)


def slow_points(n: int) -> list[dict[str, Any]]:
    """``n`` series whose host values each take the regexp filter its full 1 s."""
    return [
        {"metric": "slow.m", "timestamp": T0, "value": i, "tags": {"host": SLOW_VALUE + str(i)}}
        for i in range(n)
    ]


SLOW_QUERY = {
    "start": T0 - 100,
    "end": T0 + 100,
    "queries": [{"aggregator": "sum", "metric": "slow.m", "filters": SLOW_FILTER}],
}


# -- limits, at planning time -----------------------------------------------------------------


@pytest.mark.parametrize("start", ["1d-ago", "100y-ago"])
async def test_bucket_limit_refuses_before_the_scan(tsd: Daemon, start: str) -> None:
    await put(tsd, [{"metric": "lim.m", "timestamp": T0, "value": 1, "tags": {"h": "a"}}])
    engine = engine_of(tsd)
    status, body = await get(tsd, f"/api/query?start={start}&m=sum:1ms-avg-zero:lim.m")
    assert status == 413
    assert body["error"]["message"].startswith(
        "Sorry, you have attempted to compute more than our limit of 20000000 downsampling"
    )
    assert "trace" not in body["error"]
    assert engine.stats.scans == 0
    assert engine.stats.refused == 1
    assert engine.memory.charged == 0


async def test_bucket_limit_counts_series_before_the_kernels(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.query.limits.buckets": "300"})
    await put(
        daemon,
        [{"metric": "lim.m", "timestamp": T0, "value": 1, "tags": {"h": str(i)}} for i in range(5)],
    )
    # Up to 2 h of one-minute buckets per series (the scan window): one fits, five do not.
    query = f"/api/query?start={T0 - 1800}&end={T0 + 1800}&m=sum:1m-avg-zero:lim.m"
    ok, _ = await get(daemon, query + "{h=0}")
    assert ok == 200
    status, body = await get(daemon, query)
    assert status == 413
    assert "limit of 300 downsampling buckets" in body["error"]["message"]


async def test_output_and_memory_limits(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(
        **{"tsd.query.limits.output_points": "10", "tsd.query.limits.memory": "100000"}
    )
    points = [
        {"metric": "lim.m", "timestamp": T0 + i, "value": i, "tags": {"h": "a"}} for i in range(20)
    ]
    await put(daemon, points)
    status, body = await get(daemon, f"/api/query?start={T0}&end={T0 + 60}&m=sum:lim.m")
    assert status == 413
    assert "our limit of 10 data points" in body["error"]["message"]
    status, _ = await get(daemon, f"/api/query?start={T0}&end={T0 + 5}&m=sum:lim.m")
    assert status == 200
    # 5,000 points at an estimated 48 bytes each are past 100,000 bytes: refused mid-scan.
    many = [
        {"metric": "mem.m", "timestamp": T0 + i, "value": i, "tags": {"h": "a"}}
        for i in range(5000)
    ]
    await put(daemon, many)
    # the raw points (tsd's own hourly rollups would answer from two cells: docs/rollups.md)
    raw = "sum:1h-sum:rollup_raw:mem.m"
    status, body = await get(daemon, f"/api/query?start={T0}&end={T0 + 6000}&m={raw}")
    assert status == 413
    assert "more than our limit of 0MB of memory" in body["error"]["message"]
    assert engine_of(daemon).memory.charged == 0


async def test_memory_budget_shared_by_running_queries_answers_503(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.query.memory_budget": "1000"})
    await put(
        daemon,
        [{"metric": "b.m", "timestamp": T0 + i, "value": i, "tags": {"h": "a"}} for i in range(50)],
    )
    status, body = await get(daemon, f"/api/query?start={T0}&end={T0 + 60}&m=sum:b.m")
    assert status == 503
    assert "busy with other queries" in body["error"]["message"]


# -- cancellation -----------------------------------------------------------------------------


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_client_disconnect_cancels_the_query_and_frees_its_worker(
    make_tsd: MakeTsd,
) -> None:
    # Without cancellation the filter would match for 20 s (20 values, 1 s each).
    daemon = await make_tsd(**{"tsd.query.filter.regexp_budget": "60000"})
    await put(daemon, slow_points(20))
    engine = engine_of(daemon)
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    body = aiohttp.JsonPayload(SLOW_QUERY)._value
    head = (
        f"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    await eventually(lambda: engine.busy_slots == 1)  # matching in its worker thread
    writer.close()
    await eventually(lambda: engine.stats.cancelled == 1)
    # The worker thread saw the cancel flag at its next value and gave its slot back.
    await eventually(lambda: engine.busy_slots == 0 and engine.running == 0)
    assert engine.memory.charged == 0
    assert not await reader.read()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_shutdown_cancels_running_queries_with_a_503(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.query.filter.regexp_budget": "60000"})
    await put(daemon, slow_points(20))
    engine = engine_of(daemon)
    async with aiohttp.ClientSession() as http:

        async def query() -> tuple[int, Any]:
            url = f"http://127.0.0.1:{daemon.port}/api/query"
            async with http.post(url, json=SLOW_QUERY) as resp:
                return resp.status, await resp.json()

        running = asyncio.create_task(query())
        await eventually(lambda: engine.busy_slots == 1)
        await daemon.stop()
        status, body = await running
    assert status == 503
    assert "shutting down" in body["error"]["message"]
    assert engine.stats.cancelled == 1
    assert engine.busy_slots == 0


async def test_query_timeout_stops_the_worker(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(
        **{"tsd.query.timeout": "300", "tsd.query.filter.regexp_budget": "60000"}
    )
    await put(daemon, slow_points(20))
    engine = engine_of(daemon)
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{daemon.port}/api/query"
        async with http.post(url, json=SLOW_QUERY) as resp:
            assert resp.status == 408
    await eventually(lambda: engine.busy_slots == 0)
    assert engine.stats.timed_out == 1


async def test_regexp_budget_bounds_a_whole_query(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.query.filter.regexp_budget": "300"})
    await put(daemon, slow_points(40))
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{daemon.port}/api/query"
        async with http.post(url, json=SLOW_QUERY) as resp:
            assert resp.status == 400
            body = await resp.json()
    assert body["error"]["message"].startswith(
        "The regexp filters took longer than 0.3s in all on this query"
    )


async def test_compute_slots_stay_below_the_cores(tsd: Daemon) -> None:
    import os

    assert engine_of(tsd).compute_slots == max(1, (os.cpu_count() or 2) - 1)


# -- errors, caches, connections --------------------------------------------------------------


async def test_unexpected_error_shows_an_id_not_internals(tsd: Daemon) -> None:
    async def boom(request: Any, path: ApiPath) -> Any:
        raise RuntimeError("/opt/secret/install/path.py exploded")

    assert tsd._runner is not None
    tsd._runner.app[ROUTES]["boom"] = boom
    with structlog.testing.capture_logs() as logs:
        status, body = await get(tsd, "/boom")
    assert status == 500
    text = str(body)
    assert "secret" not in text
    assert "Traceback" not in text
    assert "trace" not in body["error"]
    error_id = body["error"]["errorId"]
    assert [e["error_id"] for e in logs if e["event"] == "http.unexpected_error"] == [error_id]


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_long_static_name_is_a_404_and_the_cache_stays_bounded(tsd: Daemon) -> None:
    status, body = await get(tsd, "/s/" + "x" * 300)
    assert status == 404
    for i in range(200):
        status, _ = await get(tsd, f"/s/missing{i}.js")
        assert status == 404
    assert ui._shipped_files.cache_info().currsize == 1


@pytest.mark.slow
async def test_silent_and_trickling_connections_are_closed(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.network.header_timeout": "1"})
    silent = await asyncio.open_connection("127.0.0.1", daemon.port)
    trickle = await asyncio.open_connection("127.0.0.1", daemon.port)
    trickle[1].write(b"GET /version HTTP/1.1\r\nHost: x\r\n")
    await trickle[1].drain()
    # The server closes both: reading hits the end of the stream.
    assert await asyncio.wait_for(silent[0].read(), 30) == b""
    assert await asyncio.wait_for(trickle[0].read(), 30) == b""
    collected = {(s.name, s.tag): s.value for s in daemon.registry.collect()}
    assert collected[("connectionmgr.connections", ("type", "timeout"))] == 2
    for _, writer in (silent, trickle):
        writer.close()


# -- write-side flow control ------------------------------------------------------------------


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_telnet_client_that_does_not_read_is_paused(tsd: Daemon) -> None:
    count = 3000  # each `stats` reply is a few KiB: megabytes if nothing held them back
    reader, writer, flow = await non_reader(tsd, b"stats\n" * count + b"version\n")
    assert flow.pauses >= 1
    # Another client is served meanwhile.
    other_reader, other_writer = await asyncio.open_connection("127.0.0.1", tsd.port)
    other_writer.write(b"version\n")
    assert (await other_reader.readline()).startswith(b"tsd ")
    other_writer.close()
    # Reading the replies resumes the connection: every command is answered, in order.
    received = bytearray()
    while b"Built on" not in received[-4096:]:
        chunk = await reader.read(1 << 20)
        assert chunk, "connection closed early"
        received += chunk
    assert received.count(b"tsd.rpc.received") == count
    assert not flow.reading_paused
    writer.close()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_large_answer_is_streamed_in_pieces(tsd: Daemon) -> None:
    n = 1100  # more series than PIECE_SERIES: streamed
    await put(
        tsd,
        [
            {"metric": "big.m", "timestamp": T0, "value": i, "tags": {"h": f"{i:05d}"}}
            for i in range(n)
        ],
    )
    url = f"http://127.0.0.1:{tsd.port}/api/query?start={T0}&end={T0 + 10}&m=sum:big.m{{h=*}}"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers.get("Transfer-Encoding") == "chunked"
        assert resp.headers.get("Content-Encoding") == "gzip"
        answer = await resp.json()
    assert [s["tags"]["h"] for s in answer] == [f"{i:05d}" for i in range(n)]
    assert [s["dps"] for s in answer[:2]] == [{str(T0): 0}, {str(T0): 1}]
    # jsonp wraps the pieces too
    async with aiohttp.ClientSession() as http, http.get(url + "&jsonp=cb") as resp:
        text = await resp.text()
    assert text.startswith("cb([{")
    assert text.endswith("}])")


def test_pieces_of_few_points_per_series_hold_more_series() -> None:
    from tsd.server.http.streaming import PIECE_SERIES, STREAM_POINTS, piece_series

    assert piece_series(5000, 5000 * 1000) == PIECE_SERIES  # a day of points each
    assert piece_series(10_000, 240_000) == STREAM_POINTS // 24  # a group-by's hour
    assert piece_series(0, 0) == STREAM_POINTS
