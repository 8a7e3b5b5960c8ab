"""Stored rollups beside OpenTSDB 2.4.1 on the same HBase (issue 12, item 2).

One OpenTSDB started with ``tsd.rollups.enable`` and a rollup config, one tsd daemon with
the same config, both on one set of tables (the four, plus the rollup and pre-aggregate
tables the config names, under the same unique prefix):

- the same /api/rollup bodies and telnet ``rollup`` lines write the same cells (row keys
  compared by names, as the UIDs each TSD assigns differ);
- bad points get the same /api/rollup replies and telnet lines;
- rollup queries (``rollupUsage``, avg from sum and count, fallback to raw) answer alike,
  OpenTSDB reading the cells tsd wrote and tsd reading OpenTSDB's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio

from tests.hbase.opentsdb import (
    OpenTSDB,
    fresh_tables,
    put_telnet,
    read_uid_table,
    running_opentsdb,
)
from tests.hbase.test_interop import tsd_keys
from tests.hbase_harness import HBaseServer
from tsd.config import StorageConfig, build_config
from tsd.daemon import Daemon
from tsd.schema import hbase_settings
from tsd.storage.base import ScanSpec
from tsd.storage.hbase import HBaseStorage

pytestmark = [pytest.mark.hbase, pytest.mark.asyncio(loop_scope="module")]

DAY = 1356998400  # 2013-01-01T00:00:00Z
INTERVALS = ("1m", "1h")


def rollup_config(prefix: str) -> dict[str, Any]:
    return {
        "aggregationIds": {"sum": 0, "count": 1, "min": 2, "max": 3},
        "intervals": [
            {
                "table": f"{prefix}tsdb",
                "preAggregationTable": f"{prefix}agg",
                "interval": "1m",
                "rowSpan": "1h",
                "defaultInterval": True,
            },
            {
                "table": f"{prefix}rollup-1h",
                "preAggregationTable": f"{prefix}rollup-agg-1h",
                "interval": "1h",
                "rowSpan": "1d",
            },
            {
                "table": f"{prefix}rollup-10m",
                "preAggregationTable": f"{prefix}rollup-agg-10m",
                "interval": "10m",
                "rowSpan": "6h",
            },
        ],
    }


@dataclass
class Env:
    cfg: StorageConfig
    prefix: str
    opentsdb: OpenTSDB
    tsd: Daemon
    storage: HBaseStorage
    http: aiohttp.ClientSession

    @property
    def tsd_url(self) -> str:
        return f"http://127.0.0.1:{self.tsd.port}"

    def table(self, name: str) -> str:
        return f"{self.prefix}{name}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(
    hbase_server: HBaseServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Env]:
    workdir = tmp_path_factory.mktemp("opentsdb-rollups")
    async with contextlib.AsyncExitStack() as stack:
        cfg = await stack.enter_async_context(fresh_tables(hbase_server))
        prefix = cfg.data_table.removesuffix("tsdb")
        conf = workdir / "rollups.json"
        conf.write_bytes(orjson.dumps(rollup_config(prefix)))
        rollup_keys = {"tsd.rollups.enable": "true", "tsd.rollups.config": str(conf)}
        opentsdb_keys = {
            **rollup_keys,
            # Netty splits a body over 8 KiB into chunks, which OpenTSDB refuses unless told
            "tsd.http.request.enable_chunked": "true",
            "tsd.http.request.max_chunk": "1048576",
            "tsd.http.show_stack_trace": "false",
        }
        # tsd first: it creates the rollup tables the config names (OpenTSDB expects them)
        daemon = Daemon(build_config({**tsd_keys(cfg), **rollup_keys}))
        await daemon.start()
        stack.push_async_callback(daemon.stop)
        opentsdb = await stack.enter_async_context(
            running_opentsdb(hbase_server, cfg, workdir, opentsdb_keys)
        )
        storage = HBaseStorage(hbase_settings(cfg))
        stack.push_async_callback(storage.close)
        http = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        )
        yield Env(cfg, prefix, opentsdb, daemon, storage, http)


async def post_rollup(env: Env, url: str, body: Any, query: str = "") -> tuple[int, Any]:
    async with env.http.post(f"{url}/api/rollup{query}", data=orjson.dumps(body)) as reply:
        text = await reply.read()
        return reply.status, orjson.loads(text) if text else None


async def named_cells(env: Env, table: str, metric: str) -> dict[Any, Any]:
    """(base time, tag names) -> [(qualifier hex, value hex)] of ``metric``'s rows."""
    uids = await read_uid_table(env.storage, env.cfg)
    uid = uids.forward.get("metrics", {}).get(metric.encode())
    if uid is None:
        return {}
    found = {}
    spec = ScanSpec(start=uid, stop=(int.from_bytes(uid, "big") + 1).to_bytes(3, "big"))
    async with contextlib.aclosing(env.storage.scan(env.table(table), spec)) as rows:
        async for row in rows:
            key = row.key
            tags = frozenset(
                (uids.name("tagk", key[i : i + 3]), uids.name("tagv", key[i + 3 : i + 6]))
                for i in range(7, len(key), 6)
            )
            found[(int.from_bytes(key[3:7], "big"), tags)] = [
                (c.qualifier.hex(), c.value.hex()) for c in row.cells
            ]
    return found


def rollup_points(metric: str) -> list[dict[str, Any]]:
    """Rollups of raw data (each aggregator, int and float values of each width), rollups
    of pre-aggregates, and pre-aggregates, over two days."""
    points = []
    values: list[Any] = [0, 1, -1, 127, 128, -129, 32768, 2147483648, 0.5, 0.1, 1.25, "1e3", -7]
    for i, value in enumerate(values):
        for agg in ("sum", "count", "MIN", "max"):
            points.append(
                {
                    "metric": metric,
                    "timestamp": DAY + i * 3600 + 59,
                    "value": value,
                    "tags": {"host": "web01"},
                    "interval": "1h",
                    "aggregator": agg,
                }
            )
        points.append(
            {
                "metric": metric,
                "timestamp": DAY + 86400 + i * 600,
                "value": value,
                "tags": {"host": "web02", "dc": "lga"},
                "interval": "10m",
                "aggregator": "sum",
            }
        )
        points.append(
            {
                "metric": metric,
                "timestamp": DAY + i * 7,
                "value": value,
                "tags": {"host": "web03"},
                "groupByAggregator": "sum",
            }
        )
        points.append(
            {
                "metric": metric,
                "timestamp": DAY + i * 3600,
                "value": value,
                "tags": {"host": "web03"},
                "interval": "1h",
                "aggregator": "max",
                "groupByAggregator": "max",
            }
        )
    return points


async def settled(env: Env, table: str, metric: str, expected: dict[Any, Any]) -> None:
    """Wait until OpenTSDB's telnet writes (acknowledged before they reach HBase) match."""
    found: dict[Any, Any] = {}
    for _ in range(300):
        found = await named_cells(env, table, metric)
        if found == expected:
            return
        await asyncio.sleep(0.1)
    assert found == expected, table


TABLES = ("rollup-1h", "rollup-agg-1h", "rollup-10m", "agg")


async def test_api_rollup_writes_the_cells_opentsdb_writes(env: Env) -> None:
    ours, theirs = "rp.http.tsd", "rp.http.otsdb"
    assert await post_rollup(env, env.tsd_url, rollup_points(ours), "?sync") == (204, None)
    assert await post_rollup(env, env.opentsdb.url, rollup_points(theirs), "?sync") == (204, None)
    for table in TABLES:
        mine = await named_cells(env, table, ours)
        assert mine, table
        assert mine == await named_cells(env, table, theirs), table


def rollup_lines(metric: str) -> list[str]:
    lines = []
    for i, value in enumerate(["0", "-1", "128", "0.5", "0.1", "1e3", "70000", "+5"]):
        lines.append(f"rollup 1h-sum {metric} {DAY + i * 3600} {value} host=web01")
        lines.append(f"rollup 10m-min:max {metric} {DAY + i * 600} {value} host=web01")
        lines.append(f"rollup max {metric} {DAY + i} {value} host=web01")
        lines.append(f"rollup 1h-count {metric} {DAY}.{i} {value} host=web01")
    return lines


async def test_telnet_rollup_writes_the_cells_opentsdb_writes(env: Env) -> None:
    ours, theirs = "rp.telnet.tsd", "rp.telnet.otsdb"
    # the millisecond timestamps (DAY.i) fail on both, with the same lines
    replies = await put_telnet(env.tsd.port, rollup_lines(ours))
    assert len(replies) == 8
    expected = await put_telnet(env.opentsdb.port, rollup_lines(theirs))
    assert [r.replace(ours, theirs) for r in replies] == expected
    for table in ("rollup-1h", "rollup-agg-10m", "agg"):
        mine = await named_cells(env, table, ours)
        assert mine, table
        await settled(env, table, theirs, mine)


BAD_POINTS: list[dict[str, Any]] = [
    {"interval": "1h"},
    {"aggregator": "sum"},
    {"interval": "1h", "aggregator": "sum", "value": "x"},
    {"interval": "1h", "aggregator": "sum", "value": "NaN.0"},
    {"interval": "2h", "aggregator": "sum"},
    {"interval": "1h", "aggregator": "p99"},
    {"interval": "1h", "aggregator": "avg"},
    {"interval": "1h", "aggregator": "sum", "timestamp": DAY * 1000},
    {"groupByAggregator": "nope"},
    {"groupByAggregator": "avg"},
    {"groupByAggregator": ""},
    {"groupByAggregator": "sum", "tags": {"host": "a", "_aggregate": "max"}},
    {"groupByAggregator": "sum", "tags": {"host": "a", "_aggregate": "sum"}},
    {"interval": "1h", "aggregator": "sum", "metric": ""},
    {"interval": "1h", "aggregator": "sum", "timestamp": 0},
    {"interval": "1h", "aggregator": "sum", "tags": {}},
    {"interval": "1h", "aggregator": "sum", "tags": {"a b": "c"}},
]


@pytest.mark.parametrize(
    "fields", BAD_POINTS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items())
)
async def test_bad_points_get_opentsdbs_replies(env: Env, fields: dict[str, Any]) -> None:
    point = {"metric": "rp.bad", "timestamp": DAY, "value": 1, "tags": {"host": "x"}, **fields}
    for query in ("", "?details", "?summary"):
        ours = await post_rollup(env, env.tsd_url, [point], query)
        theirs = await post_rollup(env, env.opentsdb.url, [point], query)
        assert ours == theirs, query


BAD_LINES = [
    "rollup 1h-sum rp.bad 1 2",
    f"rollup  rp.bad {DAY} 2 host=a",
    f"rollup 1h-sum rp.bad {DAY}x 2 host=a",
    "rollup 1h-sum rp.bad 0 2 host=a",
    f"rollup 1h-sum rp.bad {DAY} 2 host",
    f"rollup 1h-sum rp.bad {DAY} abc host=a",
    f"rollup 3h-sum rp.bad {DAY} 2 host=a",
    f"rollup 1h-dev rp.bad {DAY} 2 host=a",
    f"rollup 1h-sum rp.bad {DAY} 1e999 host=a",
    f"rollup 1h-sum rp.bad {DAY}000 1 host=a",
    f"rollup avg rp.bad {DAY} 1 host=a",
    f"rollup 1h-sum: rp.bad {DAY} 1 host=a",
    f"rollup :sum rp.bad {DAY} 1 host=a",
    f"rollup 1h-sum rp.bad {DAY} 1 host=a _aggregate=sum",
    f"rollup  {DAY} 1 host=a",
]


@pytest.mark.parametrize("line", BAD_LINES)
async def test_bad_lines_get_opentsdbs_replies(env: Env, line: str) -> None:
    assert await put_telnet(env.tsd.port, [line]) == await put_telnet(env.opentsdb.port, [line])
