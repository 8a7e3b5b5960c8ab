"""/api/rollup and the telnet ``rollup`` command on the embedded store: the cells land in the
tables the rollup config names, with OpenTSDB 2.4.1's row keys, qualifiers and values, and
bad points get OpenTSDB's answers (src/tsd/RollupDataPointRpc.java, TSDB.addAggregatePoint).
The same inputs are checked byte for byte against OpenTSDB itself in
tests/hbase/test_rollup_parity.py."""

from __future__ import annotations

import struct
from typing import Any

import aiohttp
import orjson
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient
from tsd.daemon import Daemon
from tsd.storage.base import ScanSpec

ROLLUP_CONFIG = {
    "aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
    "intervals": [
        {
            "table": "tsdb",
            "preAggregationTable": "tsdb-agg",
            "interval": "1m",
            "rowSpan": "1h",
            "defaultInterval": True,
        },
        {
            "table": "tsdb-rollup-1h",
            "preAggregationTable": "tsdb-rollup-agg-1h",
            "interval": "1h",
            "rowSpan": "1d",
        },
    ],
}
#: 2026-11-24 00:00:00 UTC, a day's start
DAY = 1795478400
T = DAY + 5 * 3600 + 17  # 05:00:17, in the 6th hour of the day


async def rollup_tsd(make_tsd: MakeTsd, **keys: str) -> Daemon:
    """Rollups stored as OpenTSDB stores them: tsd computes none of its own here (an outside
    job owns the tables; tests/query/test_own_rollups.py has tsd's own)."""
    return await make_tsd(
        **{
            "tsd.rollups.enable": "true",
            "tsd.rollups.config": orjson.dumps(ROLLUP_CONFIG).decode(),
            "tsd.rollups.compute": "false",
            **keys,
        }
    )


async def cells(daemon: Daemon, table: str) -> list[tuple[bytes, bytes, bytes]]:
    """(row key, qualifier, value) of every cell of ``table``."""
    found = []
    async for row in daemon.storage.scan(table, ScanSpec()):
        found += [(row.key, c.qualifier, c.value) for c in row.cells]
    return found


async def uid(daemon: Daemon, kind: str, name: str) -> bytes:
    service = {"metrics": daemon.uids.metrics, "tagk": daemon.uids.tagk, "tagv": daemon.uids.tagv}
    return await service[kind].get_id(name)


async def row_key(daemon: Daemon, metric: str, base: int, tags: dict[str, str]) -> bytes:
    pairs = sorted(
        [(await uid(daemon, "tagk", k), await uid(daemon, "tagv", v)) for k, v in tags.items()]
    )
    return (
        await uid(daemon, "metrics", metric)
        + struct.pack(">I", base)
        + b"".join(k + v for k, v in pairs)
    )


async def post(daemon: Daemon, body: Any, query: str = "") -> tuple[int, Any]:
    url = f"http://127.0.0.1:{daemon.port}/api/rollup{query}"
    async with aiohttp.ClientSession() as http, http.post(url, data=orjson.dumps(body)) as reply:
        text = await reply.read()
        return reply.status, orjson.loads(text) if text else None


def point(**fields: Any) -> dict[str, Any]:
    base = {"metric": "sys.cpu", "timestamp": T, "value": 42, "tags": {"host": "web01"}}
    return {**base, **fields}


async def test_a_rollup_of_raw_data_goes_to_the_intervals_table(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    status, body = await post(tsd, point(interval="1h", aggregator="SUM"))
    assert (status, body) == (204, None)
    key = await row_key(tsd, "sys.cpu", DAY, {"host": "web01"})
    # aggregator id 0, then the 6th hour (index 5) shifted by 4 bits, flags 0 (1 byte)
    assert await cells(tsd, "tsdb-rollup-1h") == [(key, b"\x00\x00\x50", b"\x2a")]
    assert await cells(tsd, "tsdb-rollup-agg-1h") == []


async def test_http_floats_take_8_bytes_and_telnet_floats_4_when_they_fit(
    make_tsd: MakeTsd,
) -> None:
    tsd = await rollup_tsd(make_tsd)
    assert (await post(tsd, point(interval="1h", aggregator="max", value=0.5)))[0] == 204
    client = await TelnetClient.connect(tsd.port)
    await client.send(f"rollup 1h-min sys.cpu {T} 0.5 host=web01\n".encode())
    await client.send(f"rollup 1h-count sys.cpu {T} 0.1 host=web01\n".encode())
    assert await client.sync() == []
    await client.close()
    stored = {q: v for _, q, v in await cells(tsd, "tsdb-rollup-1h")}
    assert stored == {
        b"\x03\x00\x5f": struct.pack(">d", 0.5),  # max: HTTP, 8 bytes
        b"\x02\x00\x5b": struct.pack(">f", 0.5),  # min: telnet, fits a float
        b"\x01\x00\x5f": struct.pack(">d", 0.1),  # count: telnet, needs a double
    }


async def test_pre_aggregates_carry_the_aggregate_tag(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    client = await TelnetClient.connect(tsd.port)
    # a pre-aggregate (default interval's pre-aggregate table, a data qualifier) and a
    # rollup of pre-aggregates (the interval's pre-aggregate table)
    await client.send(f"rollup sum sys.cpu {T} 300 host=web01\n".encode())
    await client.send(f"rollup 1h-max:sum sys.cpu {T} -2 host=web01\n".encode())
    assert await client.sync() == []
    await client.close()
    tags = {"host": "web01", "_aggregate": "SUM"}
    hour = T - T % 3600
    assert await cells(tsd, "tsdb-agg") == [
        (await row_key(tsd, "sys.cpu", hour, tags), struct.pack(">H", 17 << 4 | 1), b"\x01\x2c")
    ]
    assert await cells(tsd, "tsdb-rollup-agg-1h") == [
        (await row_key(tsd, "sys.cpu", DAY, tags), b"\x03\x00\x50", b"\xfe")
    ]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"interval": None, "aggregator": "sum"}, "Missing interval"),
        ({"interval": "1h", "aggregator": None}, "Missing aggregator"),
        (
            {"interval": "1h", "aggregator": "sum", "value": "x"},
            "Unable to parse value to a number",
        ),
        ({"interval": "2h", "aggregator": "sum"}, "Unexpected exception"),
        ({"interval": "1h", "aggregator": "p99"}, "No ID found mapping to aggregator: p99"),
        ({"interval": "1h", "aggregator": "avg"}, "No ID found mapping to aggregator: avg"),
        (
            {"interval": "1h", "aggregator": "sum", "timestamp": T * 1000},
            f"bad timestamp={T * 1000} when trying to add value=[42]/0 "
            "to metric=sys.cpu, tags={host=web01}",
        ),
        (
            {"groupByAggregator": "nope"},
            "Invalid group by aggregator nope with metric sys.cpu {_aggregate=NOPE, host=web01}",
        ),
        (
            {"groupByAggregator": "avg"},
            "Derived group by aggregations are not allowed avg with metric sys.cpu "
            "{_aggregate=AVG, host=web01}",
        ),
        (
            {"groupByAggregator": "sum", "tags": {"host": "a", "_aggregate": "max"}},
            "Given tag value for _aggregate of max did not match the group by aggregator of "
            "sum for sys.cpu {_aggregate=max, host=a}",
        ),
        ({"metric": ""}, "Metric name was empty"),
        ({"timestamp": 0}, "Invalid timestamp"),
        ({"tags": {}}, "Missing tags"),
    ],
)
async def test_refused_points_get_opentsdbs_details(
    make_tsd: MakeTsd, fields: dict[str, Any], error: str
) -> None:
    tsd = await rollup_tsd(make_tsd)
    bad = {k: v for k, v in point(**fields).items() if v is not None}
    status, body = await post(tsd, [point(interval="1h", aggregator="sum"), bad], "?details")
    assert status == 400
    assert body["success"] == 1
    assert body["failed"] == 1
    assert body["errors"][0]["error"] == error
    assert body["errors"][0]["datapoint"]["metric"] == bad["metric"]


async def test_without_details_a_failure_is_the_generic_400(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    status, body = await post(tsd, point(interval="5h", aggregator="sum"))
    assert status == 400
    assert body["error"]["message"] == "One or more data points had errors"


async def test_rollups_not_enabled(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd()
    status, body = await post(tsd, point(interval="1h", aggregator="sum"), "?details")
    assert status == 400
    assert body["errors"][0]["error"] == "No rollup or aggregations were configured"
    status, body = await post(tsd, point(groupByAggregator="sum"), "?details")
    # OpenTSDB dereferences the missing default interval inside the write: queued, then a
    # storage failure in the details
    assert status == 200
    assert body["errors"][0]["error"] == "Storage exception: null"


@pytest.mark.parametrize(
    ("line", "reply"),
    [
        (
            "rollup 1h-sum sys.cpu 1 2",
            "rollup: illegal argument: not enough arguments (need least 7, got 4)",
        ),
        (
            f"rollup  sys.cpu {T} 2 host=a",
            "rollup: illegal argument: Missing interval or aggregator",
        ),
        (
            f"rollup 1h-sum sys.cpu {T}x 2 host=a",
            f"rollup: invalid value: Invalid character 'x' in {T}x",
        ),
        ("rollup 1h-sum sys.cpu 0 2 host=a", "rollup: illegal argument: invalid timestamp: 0"),
        (f"rollup 1h-sum sys.cpu {T} 2 host", "rollup: illegal argument: invalid tag: host"),
        (
            f"rollup 1h-sum sys.cpu {T} abc host=a",
            "rollup: invalid value: Invalid character 'a' in abc",
        ),
        (
            f"rollup 3h-sum sys.cpu {T} 2 host=a",
            "rollup: No such rollup: No rollups configured for the interval: 3h",
        ),
        (
            f"rollup 1h-dev sys.cpu {T} 2 host=a",
            "rollup: illegal argument: No ID found mapping to aggregator: dev",
        ),
        (
            f"rollup 1h-sum sys.cpu {T} 1e999 host=a",
            "rollup: illegal argument: value is NaN or Infinite: Infinity "
            f"for metric=sys.cpu timestamp={T}",
        ),
    ],
)
async def test_telnet_replies(make_tsd: MakeTsd, line: str, reply: str) -> None:
    tsd = await rollup_tsd(make_tsd)
    client = await TelnetClient.connect(tsd.port)
    await client.send(line.encode() + b"\n")
    assert await client.sync() == [reply.encode()]
    await client.close()


async def test_help_lists_rollup(make_tsd: MakeTsd) -> None:
    tsd = await make_tsd()
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"help\n")
    assert b" put rollup " in await client.line()
    await client.close()


# -- reading rollups ----------------------------------------------------------------------------


async def get_query(daemon: Daemon, m: str, **params: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{daemon.port}/api/query"
    query = {"start": str(DAY), "end": str(DAY + 86400 - 1), "m": m, **params}
    async with aiohttp.ClientSession() as http, http.get(url, params=query) as reply:
        return reply.status, orjson.loads(await reply.read())


def dps(answer: Any) -> list[dict[int, Any]]:
    return [{int(ts): v for ts, v in r["dps"].items()} for r in answer]


async def hourly(daemon: Daemon, metric: str, host: str, rows: dict[str, list[float]]) -> None:
    """Hourly rollups of each aggregator in ``rows`` (value i at hour i)."""
    points = [
        point(
            metric=metric,
            timestamp=DAY + i * 3600,
            value=value,
            tags={"host": host},
            interval="1h",
            aggregator=agg,
        )
        for agg, values in rows.items()
        for i, value in enumerate(values)
    ]
    assert (await post(daemon, points))[0] == 204


async def test_downsampled_queries_read_the_rollups(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    await hourly(tsd, "r.q", "a", {"sum": [10, 20, 30], "count": [2, 4, 5], "max": [7, 9, 8]})
    await hourly(tsd, "r.q", "b", {"sum": [1, 2, 3], "count": [1, 1, 1], "max": [1, 2, 3]})
    # raw data under the same metric: read only when the rollups are not
    raw = [point(metric="r.q", timestamp=DAY + 60, value=1000, tags={"host": "a"})]
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{tsd.port}/api/put"
        async with http.post(url, data=orjson.dumps(raw), params={"sync": ""}) as reply:
            assert reply.status == 204
    h = [DAY, DAY + 3600, DAY + 7200]
    status, answer = await get_query(tsd, "sum:1h-sum:r.q")
    assert status == 200
    assert dps(answer) == [{h[0]: 11, h[1]: 22, h[2]: 33}]
    # avg from sum and count, per series, then the group's sum
    _, answer = await get_query(tsd, "sum:1h-avg:r.q")
    assert dps(answer) == [{h[0]: 10 / 2 + 1, h[1]: 20 / 4 + 2, h[2]: 30 / 5 + 3}]
    # a 2h bucket: sums over counts of the bucket's rollups
    _, answer = await get_query(tsd, "max:2h-avg:r.q{host=a}")
    assert dps(answer) == [{h[0]: 30 / 6, h[2]: 30 / 5}]
    _, answer = await get_query(tsd, "sum:2h-count:r.q")
    assert dps(answer) == [{h[0]: 2 + 4 + 1 + 1, h[2]: 5 + 1}]
    _, answer = await get_query(tsd, "max:1h-mimmax:r.q")
    assert dps(answer) == [{h[0]: 7, h[1]: 9, h[2]: 8}]
    # the default interval (1m) is raw data, and so is ROLLUP_RAW
    _, answer = await get_query(tsd, "sum:1m-sum:r.q")
    assert dps(answer) == [{DAY + 60: 1000}]
    _, answer = await get_query(tsd, "sum:1h-sum:rollup_raw:r.q")
    assert dps(answer) == [{DAY: 1000}]
    # a function with no rollup column
    status, answer = await get_query(tsd, "sum:1h-first:r.q")
    assert status == 400
    assert answer["error"]["message"] == "No ID found mapping to aggregator: first"


async def test_rollup_usage_fallbacks(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    raw = [
        point(metric="r.fb", timestamp=DAY + 60 * i, value=i, tags={"host": "a"}) for i in range(3)
    ]
    assert (await post_put(tsd, raw)) == 204
    # no 1h rollups of r.fb: NOFALLBACK answers nothing, FALLBACK_RAW and FALLBACK read raw
    assert dps((await get_query(tsd, "sum:1h-sum:r.fb"))[1]) == []
    assert dps((await get_query(tsd, "sum:1h-sum:rollup_nofallback:r.fb"))[1]) == []
    for usage in ("rollup_fallback_raw", "rollup_fallback"):
        assert dps((await get_query(tsd, f"sum:1h-sum:{usage}:r.fb"))[1]) == [{DAY: 3}]
    # rows with other columns only are not found either
    await hourly(tsd, "r.fb", "a", {"sum": [50]})
    assert dps((await get_query(tsd, "sum:1h-sum:r.fb"))[1]) == [{DAY: 50}]
    assert dps((await get_query(tsd, "sum:1h-max:r.fb"))[1]) == []
    assert dps((await get_query(tsd, "sum:1h-max:rollup_fallback:r.fb"))[1]) == [{DAY: 2}]


async def test_pre_aggregate_queries_read_the_pre_aggregate_tables(make_tsd: MakeTsd) -> None:
    tsd = await rollup_tsd(make_tsd)
    client = await TelnetClient.connect(tsd.port)
    await client.send(f"rollup sum r.pa {DAY + 5} 40 host=a\n".encode())
    await client.send(f"rollup 1h-sum:sum r.pa {DAY} 400 host=a\n".encode())
    assert await client.sync() == []
    await client.close()
    _, answer = await get_query(tsd, "sum:pre-agg:r.pa")
    assert dps(answer) == [{DAY + 5: 40}]
    _, answer = await get_query(tsd, "sum:1h-sum:pre-agg:r.pa")
    assert dps(answer) == [{DAY: 400}]
    assert answer[0]["tags"] == {"host": "a", "_aggregate": "SUM"}


async def post_put(daemon: Daemon, points: list[dict[str, Any]]) -> int:
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{daemon.port}/api/put"
        async with http.post(url, data=orjson.dumps(points), params={"sync": ""}) as reply:
            return reply.status
