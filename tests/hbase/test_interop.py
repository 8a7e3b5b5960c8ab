"""tsd and OpenTSDB 2.4.1 side by side on the same HBase tables (issue 4, item 7).

One OpenTSDB (about 5 s to start) and one in-process tsd daemon serve the whole module,
both on one set of OpenTSDB's four tables; every test uses metric names of its own.

- Points put into tsd (telnet, /api/put) come back from OpenTSDB's /api/query, values and
  JSON types unchanged.
- Points put into OpenTSDB come back from tsd's storage (decoded by tsd's codec, named by
  tsd's UID service) and from tsd's /api/query, which answers as OpenTSDB's does for raw,
  summed, downsampled, rate and filtered queries, before and after OpenTSDB's
  read-triggered compaction rewrote the rows.
- A name either TSD assigned a UID to is used by the other under that UID.
- For the same telnet lines, the cells each TSD writes are the same bytes (row keys
  compared after mapping UIDs to names, as the order of assignment differs), and so are
  the compacted cells: OpenTSDB's from its read-triggered compaction, tsd's from its
  Compactor (the code the writer's compaction task runs).

OpenTSDB's background compaction is held off (``min_flush_threshold``) so that it compacts
only when a test queries it; tsd's daemon runs with compaction off, for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

import tsd.query.engine as engine_module
from tests.hbase.opentsdb import (
    OpenTSDB,
    UidTable,
    fresh_tables,
    put_telnet,
    read_uid_table,
    running_opentsdb,
    tsd_hbase_keys,
)
from tests.hbase_harness import HBaseServer
from tsd.codec import KeyLayout, decode_cells, decode_row_key
from tsd.config import StorageConfig, build_config
from tsd.daemon import Daemon
from tsd.query.read_path import KEY_ONLY, MULTI_GET, RANGES, SCAN
from tsd.stats import StatsRegistry
from tsd.storage.base import Row, ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings
from tsd.write.compactor import Compactor

pytestmark = [pytest.mark.hbase, pytest.mark.asyncio(loop_scope="module")]

H0 = 1356998400  # 2013-01-01T00:00:00Z: old hours, which OpenTSDB compacts when read
H1 = H0 + 3600
#: seconds to wait for writes that are acknowledged before they reach HBase
SETTLE_TIMEOUT_S = 60.0
OPENTSDB_CONF = {
    # OpenTSDB compacts only when queried: its background pass never has enough rows queued.
    "tsd.storage.compaction.min_flush_threshold": "1000000000",
    # Netty splits a body over 8 KiB into chunks, which OpenTSDB refuses (400) unless told.
    "tsd.http.request.enable_chunked": "true",
    "tsd.http.request.max_chunk": "1048576",
}


@dataclass
class Interop:
    cfg: StorageConfig
    opentsdb: OpenTSDB
    tsd: Daemon
    storage: HBaseStorage  # for reading the tables directly
    http: aiohttp.ClientSession

    @property
    def tsd_url(self) -> str:
        return f"http://127.0.0.1:{self.tsd.port}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def interop(
    hbase_server: HBaseServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Interop]:
    workdir = tmp_path_factory.mktemp("opentsdb")
    async with contextlib.AsyncExitStack() as stack:
        cfg = await stack.enter_async_context(fresh_tables(hbase_server))
        opentsdb = await stack.enter_async_context(
            running_opentsdb(hbase_server, cfg, workdir, OPENTSDB_CONF)
        )
        daemon = Daemon(build_config(tsd_keys(cfg, workdir / "tsd-data")))
        await daemon.start()
        stack.push_async_callback(daemon.stop)
        storage = HBaseStorage(hbase_settings(cfg))
        stack.push_async_callback(storage.close)
        http = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        )
        yield Interop(cfg, opentsdb, daemon, storage, http)


def tsd_keys(cfg: StorageConfig, data_dir: Path) -> dict[str, str]:
    """An in-process tsd on ``cfg``'s tables, its write-ahead log in ``data_dir``."""
    return {
        "tsd.network.bind": "127.0.0.1",
        "tsd.network.port": "0",
        "tsd.core.auto_create_metrics": "true",
        **tsd_hbase_keys(cfg, data_dir),
    }


# -- reading the shared tables ----------------------------------------------------------------


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until true: telnet puts and OpenTSDB's compaction write-back are not
    acknowledged when they reach HBase, so tests watch the tables instead."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {SETTLE_TIMEOUT_S} s: {what}")
        await asyncio.sleep(0.1)


async def metric_rows(env: Interop, metric: str) -> list[Row]:
    """The data rows of ``metric`` (none while it has no UID)."""
    uids = await read_uid_table(env.storage, env.cfg)
    uid = uids.forward.get("metrics", {}).get(metric.encode())
    if uid is None:
        return []
    stop = (int.from_bytes(uid, "big") + 1).to_bytes(len(uid), "big")
    spec = ScanSpec(start=uid, stop=stop, families=("t",))
    async with contextlib.aclosing(env.storage.scan(env.cfg.data_table, spec)) as rows:
        return [row async for row in rows]


async def cell_count(env: Interop, metric: str) -> int:
    return sum(len(row.cells) for row in await metric_rows(env, metric))


async def wait_for_cells(env: Interop, metric: str, count: int) -> None:
    async def arrived() -> bool:
        return await cell_count(env, metric) >= count

    await wait_until(arrived, f"{count} cells of {metric}")


SeriesId = tuple[str, int, frozenset[tuple[str, str]]]  # metric, base time, tags


def named_cells(uids: UidTable, rows: Iterable[Row], metric_prefix: str) -> dict[SeriesId, Any]:
    """Each row as (metric without ``metric_prefix``, base time, tag names) -> its cells, the
    key decoded by hand (3-byte UIDs, no salt) so that tsd's codec is not what checks tsd."""
    found: dict[SeriesId, Any] = {}
    for row in rows:
        key = row.key
        metric = uids.name("metrics", key[:3])
        assert metric.startswith(metric_prefix), metric
        tags = frozenset(
            (uids.name("tagk", key[i : i + 3]), uids.name("tagv", key[i + 3 : i + 6]))
            for i in range(7, len(key), 6)
        )
        series = (metric.removeprefix(metric_prefix), int.from_bytes(key[3:7], "big"), tags)
        found[series] = [(cell.qualifier.hex(), cell.value.hex()) for cell in row.cells]
    return found


# -- queries ----------------------------------------------------------------------------------


async def query(env: Interop, url: str, params: dict[str, str]) -> list[dict[str, Any]]:
    async with env.http.get(f"{url}/api/query", params=params) as reply:
        body = await reply.json(content_type=None)
        assert reply.status == 200, (url, params, body)
    assert isinstance(body, list)
    return body


def comparable(answer: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """An /api/query answer in a form that compares semantically: results sorted by metric
    and tags; dps as (timestamp, value) in time order, with the value's JSON type."""
    results = [
        (
            result["metric"],
            sorted(result["tags"].items()),
            sorted(result["aggregateTags"]),
            sorted((int(ts), type(value).__name__, value) for ts, value in result["dps"].items()),
        )
        for result in answer
    ]
    return sorted(results, key=lambda r: (r[0], r[1]))


def assert_same_answer(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    mine, java = comparable(ours), comparable(theirs)
    assert [r[:3] for r in mine] == [r[:3] for r in java]
    for (metric, tags, _, dps), (_, _, _, java_dps) in zip(mine, java, strict=True):
        assert [(ts, kind) for ts, kind, _ in dps] == [(ts, kind) for ts, kind, _ in java_dps], (
            metric,
            tags,
        )
        for (ts, _, value), (_, _, java_value) in zip(dps, java_dps, strict=True):
            # Same arithmetic in the same order gives the same double; the tolerance covers
            # a sum taken in another order (a last-place difference), nothing more.
            assert math.isclose(value, java_value, rel_tol=1e-12, abs_tol=1e-300), (
                metric,
                tags,
                ts,
                value,
                java_value,
            )


def as_opentsdb_answers(dps: dict[int, int | float]) -> dict[int, tuple[str, int | float]]:
    """A series' points as OpenTSDB's /api/query shows them, one at a time (``none``).

    OpenTSDB's AggregationIterator answers a point as a double when it *or the next point*
    of the series is a double (its ``isInteger`` looks at both buffered points), so an
    integer followed by a float comes back as a JSON float.
    """
    times = sorted(dps)
    shown = {}
    for i, ts in enumerate(times):
        value, after = dps[ts], dps[times[i + 1]] if i + 1 < len(times) else 0
        if isinstance(value, float) or isinstance(after, float):
            shown[ts] = ("float", float(value))
        else:
            shown[ts] = ("int", value)
    return shown


def typed(text: str) -> int | float:
    """A put value as OpenTSDB reads it: an integer unless it has '.', 'e' or 'E'."""
    return float(text) if any(c in text for c in ".eE") else int(text)


# -- tsd -> OpenTSDB ----------------------------------------------------------------------------

VALUE_TEXTS = ["0", "-1", "127", "-129", "40000", "-2147483649", "9223372036854775807"]
VALUE_TEXTS += ["0.5", "-0.0", "0.1", "1e40", "3.141592653589793", "1.5e3"]


async def test_points_put_into_tsd_come_back_from_opentsdb(interop: Interop) -> None:
    env = interop
    lines: list[str] = []
    expected: dict[tuple[str, str], dict[int, int | float]] = {}
    for host in ("web01", "web02"):
        dps = expected.setdefault(("interop.tsd.telnet", host), {})
        for i, text in enumerate(VALUE_TEXTS):
            lines.append(f"put interop.tsd.telnet {H0 + 10 * i} {text} host={host} dc=lga")
            dps[(H0 + 10 * i) * 1000] = typed(text)
        ms = H0 * 1000 + 200_250  # a millisecond timestamp
        lines.append(f"put interop.tsd.telnet {ms} 7 host={host} dc=lga")
        dps[ms] = 7
    assert await put_telnet(env.tsd.port, lines) == []
    json_points: list[tuple[str, int, int | float]] = [  # host, timestamp in ms, value
        (host, (H0 + 5 * i) * 1000, value)
        for host in ("web01", "web02")
        for i, value in enumerate([1, 2.5, -3, 0.1, 2**40, 1e-300])
    ]
    json_points.append(("web01", H1 * 1000 + 1, 9))
    body = []
    for host, ms, value in json_points:
        expected.setdefault(("interop.tsd.http", host), {})[ms] = value
        # whole seconds as seconds, the rest in milliseconds (both forms of /api/put)
        ts = ms // 1000 if ms % 1000 == 0 else ms
        body.append({"metric": "interop.tsd.http", "timestamp": ts, "value": value})
        body[-1]["tags"] = {"host": host}
    async with env.http.post(f"{env.tsd_url}/api/put?sync&details", json=body) as reply:
        assert (reply.status, (await reply.json())["success"]) == (200, len(body))
    await wait_for_cells(env, "interop.tsd.telnet", len(lines))

    for metric in ("interop.tsd.telnet", "interop.tsd.http"):
        params = {"start": str(H0), "end": str(H1 + 3599), "m": f"none:{metric}", "ms": "true"}
        answer = await query(env, env.opentsdb.url, params)
        got = {
            (metric, result["tags"]["host"]): {
                int(ts): (type(v).__name__, v) for ts, v in result["dps"].items()
            }
            for result in answer
        }
        want = {key: as_opentsdb_answers(dps) for key, dps in expected.items() if key[0] == metric}
        assert got.keys() == want.keys()
        assert [
            (key, ts, got[key].get(ts), want[key].get(ts))
            for key in want
            for ts in sorted(got[key].keys() | want[key].keys())
            if got[key].get(ts) != want[key].get(ts)
        ] == []


# -- OpenTSDB -> tsd ----------------------------------------------------------------------------

QUERY_METRIC = "interop.otsdb.q"
HOSTS = {"web01": "a", "web02": "a", "web03": "b"}


def opentsdb_points() -> list[dict[str, Any]]:
    """Two hours of three series at different steps and phases: a counter of ints, doubles,
    and ints with a 20-minute gap (so aggregation interpolates)."""
    points: list[dict[str, Any]] = []

    def add(host: str, ts: int, value: int | float) -> None:
        tags = {"host": host, "dc": HOSTS[host]}
        points.append({"metric": QUERY_METRIC, "timestamp": ts, "value": value, "tags": tags})

    for i in range(720):
        add("web01", H0 + 10 * i, 1000 + 7 * i)
    for i in range(480):
        add("web02", H0 + 5 + 15 * i, (i % 40) * 0.1)
    for i in range(240):  # every 25th a double: the integers before them are shown as doubles
        if not 60 <= i < 100:
            add("web03", H0 + 3 + 30 * i, (i * i) % 97 - 40 + (0.5 if i % 25 == 0 else 0))
    return points


QUERIES = [
    pytest.param(f"none:{QUERY_METRIC}", id="raw"),
    pytest.param(f"sum:{QUERY_METRIC}", id="sum"),
    pytest.param(f"sum:1m-avg:{QUERY_METRIC}", id="sum_1m_avg"),
    pytest.param(f"avg:10m-max:{QUERY_METRIC}{{dc=*}}", id="avg_10m_max_by_dc"),
    pytest.param(f"sum:rate:{QUERY_METRIC}", id="rate"),
    pytest.param(f"max:rate{{counter,5000,1}}:{QUERY_METRIC}{{host=web01}}", id="counter_rate"),
    pytest.param(f"sum:{QUERY_METRIC}{{host=literal_or(web01|web03)}}", id="literal_or_group"),
    pytest.param(f"min:{QUERY_METRIC}{{}}{{host=wildcard(web0*),dc=a}}", id="filter_no_group"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def opentsdb_data(interop: Interop) -> list[dict[str, Any]]:
    """:func:`opentsdb_points`, put into OpenTSDB (acknowledged once in HBase)."""
    points = opentsdb_points()
    url = f"{interop.opentsdb.url}/api/put?summary&sync&sync_timeout=60000"
    for start in range(0, len(points), 500):
        async with interop.http.post(url, json=points[start : start + 500]) as reply:
            body = await reply.json()
            assert (reply.status, body["failed"]) == (200, 0), body
    return points


async def test_points_put_into_opentsdb_are_read_by_tsds_storage(
    interop: Interop, opentsdb_data: list[dict[str, Any]]
) -> None:
    uids = interop.tsd.uids
    metric_uid = await uids.metrics.get_id(QUERY_METRIC)
    layout = KeyLayout()
    got = set()
    for row in await metric_rows(interop, QUERY_METRIC):
        key = decode_row_key(layout, row.key)
        assert key.metric_uid == metric_uid
        tags = {await uids.tagk.get_name(k): await uids.tagv.get_name(v) for k, v in key.tags}
        cells = [(cell.qualifier, cell.value) for cell in row.cells]
        for point in decode_cells(key.base_time_s, cells).points:
            got.add((tags["host"], tags["dc"], point.timestamp_ms, point.value))
    want = {
        (p["tags"]["host"], p["tags"]["dc"], p["timestamp"] * 1000, p["value"])
        for p in opentsdb_data
    }
    assert got == want


@pytest.mark.parametrize("m", QUERIES)
async def test_tsd_answers_queries_on_opentsdbs_data_as_opentsdb_does(
    interop: Interop, opentsdb_data: list[dict[str, Any]], m: str
) -> None:
    params = {"start": str(H0), "end": str(H0 + 7199), "m": m}
    ours_first = await query(interop, interop.tsd_url, params)
    theirs = await query(interop, interop.opentsdb.url, params)
    assert theirs, "OpenTSDB found nothing"
    assert_same_answer(ours_first, theirs)
    # OpenTSDB's query rewrote the rows it read as compacted cells (read-triggered
    # compaction): once that is in HBase, tsd reads those and answers the same.
    await wait_for_compacted(interop, QUERY_METRIC)
    assert_same_answer(await query(interop, interop.tsd_url, params), theirs)


async def wait_for_compacted(env: Interop, metric: str) -> None:
    async def compacted() -> bool:
        return all(len(row.cells) == 1 for row in await metric_rows(env, metric))

    await wait_until(compacted, f"OpenTSDB compacting the rows of {metric}")


# -- UIDs -------------------------------------------------------------------------------------


async def test_uids_opentsdb_assigned_are_used_by_tsd(interop: Interop) -> None:
    env = interop
    metric, tags = "interop.uid.by_otsdb", {"uidhost": "made-by-opentsdb"}
    point = {"metric": metric, "timestamp": H0, "value": 1, "tags": tags}
    async with env.http.post(f"{env.opentsdb.url}/api/put?sync", json=[point]) as reply:
        assert reply.status == 204
    before = await read_uid_table(env.storage, env.cfg)

    assert (
        await put_telnet(env.tsd.port, [f"put {metric} {H0 + 1} 2 uidhost=made-by-opentsdb"]) == []
    )
    await wait_for_cells(env, metric, 2)

    after = await read_uid_table(env.storage, env.cfg)
    assert after == before  # tsd assigned nothing
    key = after.uid("metrics", metric) + H0.to_bytes(4, "big")
    key += after.uid("tagk", "uidhost") + after.uid("tagv", "made-by-opentsdb")
    assert [row.key for row in await metric_rows(env, metric)] == [key]
    await assert_both_answer(env, metric, {H0: 1, H0 + 1: 2})


async def test_uids_tsd_assigned_are_used_by_opentsdb(interop: Interop) -> None:
    env = interop
    metric = "interop.uid.by_tsd"
    assert await put_telnet(env.tsd.port, [f"put {metric} {H0} 1 uidhost=made-by-tsd"]) == []
    await wait_for_cells(env, metric, 1)
    before = await read_uid_table(env.storage, env.cfg)

    point = {"metric": metric, "timestamp": H0 + 1, "value": 2, "tags": {"uidhost": "made-by-tsd"}}
    async with env.http.post(f"{env.opentsdb.url}/api/put?sync", json=[point]) as reply:
        assert reply.status == 204

    after = await read_uid_table(env.storage, env.cfg)
    assert after == before  # OpenTSDB assigned nothing
    key = after.uid("metrics", metric) + H0.to_bytes(4, "big")
    key += after.uid("tagk", "uidhost") + after.uid("tagv", "made-by-tsd")
    rows = await metric_rows(env, metric)
    assert [(row.key, len(row.cells)) for row in rows] == [(key, 2)]
    await assert_both_answer(env, metric, {H0: 1, H0 + 1: 2})
    assert after.problems() == []


async def assert_both_answer(env: Interop, metric: str, dps: dict[int, int]) -> None:
    params = {"start": str(H0), "end": str(H0 + 3599), "m": f"sum:{metric}"}
    for url in (env.opentsdb.url, env.tsd_url):
        answer = await query(env, url, params)
        assert [{int(ts): v for ts, v in r["dps"].items()} for r in answer] == [dps], url


# -- the same lines, the same bytes -----------------------------------------------------------

#: values covering each integer width's edges, float32-exact and not, and the forms of a number
CELL_VALUES = ["0", "1", "-1", "127", "128", "-128", "-129", "32767", "32768", "-32768"]
CELL_VALUES += ["-32769", "2147483647", "2147483648", "-2147483648", "-2147483649"]
CELL_VALUES += ["9223372036854775807", "-9223372036854775808", "+5", "0.5", "1.25", "-0.0"]
CELL_VALUES += ["1.0", "0.1", "3.141592653589793", "1e40", "1.5e3", "123456.789"]
CELL_VALUES += ["3.4028234663852886E38", "3.4028235e38", "1e-45", "-7"]


def cell_lines(metric: str) -> list[str]:
    """Telnet lines over two hours: a row mixing second and millisecond points, a row of
    second points at an hour's edges with three tags, a row of millisecond points (one on a
    whole second), a row of one point."""
    one, three = "host=web01", "host=web01 dc=lga rack=r7"
    lines = [f"put {metric} {H0 + i} {text} {one}" for i, text in enumerate(CELL_VALUES)]
    lines += [
        f"put {metric} {ms} {text} {one}"
        for ms, text in [
            (H0 * 1000 + 40_500, "1.5"),
            (H0 * 1000 + 50_000, "42"),
            (H0 * 1000 + 3_599_999, "-3"),
        ]
    ]
    lines += [
        f"put {metric} {H0 + s} {text} {three}"
        for s, text in [(0, "1"), (60, "0.1"), (3599, "1099511627776")]
    ]
    lines += [
        f"put {metric} {ms} {text} host=web02"
        for ms, text in [(H0 * 1000, "7"), (H0 * 1000 + 1, "0.5"), (H0 * 1000 + 59_999, "70000")]
    ]
    lines.append(f"put {metric} {H1 + 3599} -0.0 {three}")
    return lines


async def write_through_both(env: Interop, name: str) -> tuple[str, str]:
    """The lines of :func:`cell_lines` into tsd as ``<name>.tsd`` and into OpenTSDB as
    ``<name>.otsdb``, both over telnet; returns the two metric names once all cells are in."""
    ours, theirs = f"{name}.tsd", f"{name}.otsdb"
    assert await put_telnet(env.tsd.port, cell_lines(ours)) == []
    assert await put_telnet(env.opentsdb.port, cell_lines(theirs)) == []
    expected = len(cell_lines(name))
    await wait_for_cells(env, ours, expected)
    await wait_for_cells(env, theirs, expected)
    return ours, theirs


async def cells_by_name(env: Interop, metric: str) -> dict[SeriesId, Any]:
    uids = await read_uid_table(env.storage, env.cfg)
    return named_cells(uids, await metric_rows(env, metric), metric)


async def test_tsd_writes_the_cells_opentsdb_writes(interop: Interop) -> None:
    ours, theirs = await write_through_both(interop, "interop.cells")
    tsd_cells = await cells_by_name(interop, ours)
    assert len(tsd_cells) == 4  # rows
    assert tsd_cells == await cells_by_name(interop, theirs)


async def test_tsd_compacts_rows_into_the_cells_opentsdb_compacts_them_into(
    interop: Interop,
) -> None:
    env = interop
    ours, theirs = await write_through_both(env, "interop.compacted")
    # OpenTSDB compacts the rows a query reads once their hour is over; tsd's Compactor
    # is what its writer runs on closed hours.
    params = {"start": str(H0), "end": str(H1 + 3599), "m": f"sum:{theirs}"}
    assert await query(env, env.opentsdb.url, params)
    await wait_for_compacted(env, theirs)
    rows = [row.key for row in await metric_rows(env, ours)]
    await Compactor(env.storage, env.cfg.data_table, StatsRegistry(), fix_duplicates=False).compact(
        rows
    )
    tsd_cells = await cells_by_name(env, ours)
    assert all(len(cells) == 1 for cells in tsd_cells.values())
    assert tsd_cells == await cells_by_name(env, theirs)


# -- series OpenTSDB writes after tsd's series index exists -------------------------------------

INDEX_METRIC = "interop.index.m"


async def tsd_lookup(env: Interop, metric: str) -> set[tuple[tuple[str, str], ...]]:
    """The series tsd's /api/search/lookup lists (read from tsd's series index only)."""
    params = {"m": metric, "useMeta": "false"}
    async with env.http.get(f"{env.tsd_url}/api/search/lookup", params=params) as reply:
        body = await reply.json(content_type=None)
        assert reply.status == 200, body
    return {tuple(sorted(r["tags"].items())) for r in body["results"]}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tsd_indexed_series(interop: Interop) -> list[dict[str, str]]:
    """tsd writes two series of INDEX_METRIC and indexes them; then OpenTSDB writes two more
    (one under a tag value only OpenTSDB assigned). Returns the series tsd wrote."""
    env = interop
    tsd_series = [{"host": "web01", "cpu": "0"}, {"host": "web02", "cpu": "0"}]
    java_series = [{"host": "web09", "cpu": "0"}, {"host": "web01", "cpu": "1"}]
    body = [
        {"metric": INDEX_METRIC, "timestamp": H0 + 60 * i, "value": i + n, "tags": tags}
        for n, tags in enumerate(tsd_series)
        for i in range(30)
    ]
    async with env.http.post(f"{env.tsd_url}/api/put?sync", json=body) as reply:
        assert reply.status == 204, await reply.text()

    async def indexed() -> bool:
        return len(await tsd_lookup(env, INDEX_METRIC)) == len(tsd_series)

    await wait_until(indexed, "tsd indexing its series")
    body = [
        {"metric": INDEX_METRIC, "timestamp": H0 + 30 + 60 * i, "value": 100 * n + i}
        | {"tags": tags}
        for n, tags in enumerate(java_series, start=1)
        for i in range(30)
    ]
    url = f"{env.opentsdb.url}/api/put?summary&sync&sync_timeout=60000"
    async with env.http.post(url, json=body) as reply:
        assert (reply.status, (await reply.json())["failed"]) == (200, 0)
    return tsd_series


W01, W09 = {"host": "web01"}, {"host": "web09", "cpu": "0"}


@pytest.mark.parametrize(
    ("m", "path", "groups"),
    [
        pytest.param(f"none:{INDEX_METRIC}{{host=web09}}", RANGES, [W09], id="new_value"),
        pytest.param(f"sum:{INDEX_METRIC}{{host=web01}}", RANGES, [W01], id="new_series"),
        pytest.param(
            f"sum:{INDEX_METRIC}{{host=literal_or(web01|web09)}}", RANGES, [W01, W09], id="or"
        ),
        pytest.param(
            f"none:explicit_tags:{INDEX_METRIC}{{host=web09,cpu=0}}", MULTI_GET, [W09], id="exact"
        ),
        pytest.param(
            f"none:explicit_tags:{INDEX_METRIC}{{host=web01|web09,cpu=0|1}}",
            MULTI_GET,
            [{"host": "web01", "cpu": "0"}, {"host": "web01", "cpu": "1"}, W09],
            id="exact_many",
        ),
        pytest.param(
            f"sum:{INDEX_METRIC}{{host=*}}",
            SCAN,
            [W01, {"host": "web02", "cpu": "0"}, W09],
            id="group_all",
        ),
    ],
)
async def test_series_opentsdb_writes_after_tsds_index_are_found_on_every_path(
    interop: Interop,
    tsd_indexed_series: list[dict[str, str]],
    m: str,
    path: str,
    groups: list[dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/hbase.md's rule: tsd's series index is never trusted for reading data, because
    OpenTSDB (meta tracking off) writes series it does not list. Here tsd writes two series
    and its index lists them; then OpenTSDB writes two more of the same metric (one under a
    tag value only OpenTSDB assigned); tsd's index still lists two, and every read path the
    planner can pick (multi-get, narrowed ranges, key-only pass, scan) gives OpenTSDB's
    answer with all four."""
    env = interop
    # the index does not know OpenTSDB's series: reading through it would miss them
    assert await tsd_lookup(env, INDEX_METRIC) == {
        tuple(sorted(tags.items())) for tags in tsd_indexed_series
    }
    params = {"start": str(H0), "end": str(H0 + 3599), "m": m, "show_stats": "true"}
    chosen = await query(env, env.tsd_url, params)
    theirs = await query(
        env, env.opentsdb.url, {k: v for k, v in params.items() if k != "show_stats"}
    )
    assert_same_answer(chosen, theirs)
    # the groups include OpenTSDB's series (host=web01 groups cpu 0 from tsd and 1 from it)
    assert sorted((sorted(r["tags"].items()), r["aggregateTags"]) for r in chosen) == sorted(
        (sorted(g.items()), ["cpu"] if g == W01 else []) for g in groups
    )
    assert {r["stats"]["readPath"] for r in chosen} == {path}
    # read by the backend's reply reader (reply bytes counted), not row by row through a
    # wrapper's fallback (the daemon's InstrumentedStorage forwards the bulk reads)
    assert all(r["stats"]["bytesFromStorage"] > 0 for r in chosen)
    for forced in [SCAN, KEY_ONLY, RANGES] + ([MULTI_GET] if path == MULTI_GET else []):
        monkeypatch.setattr(engine_module, "choose_path", lambda plan, request, p=forced: p)
        assert_same_answer(await query(env, env.tsd_url, params), theirs)
