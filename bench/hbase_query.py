"""Queries on HBase: tsd beside OpenTSDB 2.4.1, on the same tables and the same cells.

One standalone HBase (``scripts/hbase``, free ports, a temporary directory, stopped at the
end) holds one set of OpenTSDB's tables, loaded directly through tsd's storage (UIDs
assigned through tsd's UID service, so both daemons resolve the same names):

* ``q.single``: 1,000 series (``host=h000..h124`` x ``cpu=0..7``) x 1 h at 10 s, single
  cells (360,000 cells);
* ``q.compact``: the same 1,000 series x 24 h at 10 s, one compacted cell per row
  (24,000 cells, 8,640,000 points);
* ``q.wide``: 10,000 series (``host=h00000..h09999`` x ``dc=a|b``) x 1 h at 5 min, single
  cells (120,000 cells).

Then a ``python -m tsd tsd`` daemon (backend hbase, compaction off) and OpenTSDB 2.4.1
(``tsd.storage.enable_compaction = false``: its read-time compaction would rewrite the rows
on the first query; OpenTSDB 2.4 has no query result cache) serve the same tables. Queries
(``/api/query`` over HTTP, one at a time):

* ``all single``: ``sum:1m-avg:q.single`` over the hour;
* ``one series``: ``none:q.single{host=h001,cpu=1}`` raw;
* ``4 of 10,000``: ``sum:q.wide{host=h00001|h00002|h00003|h00004}`` (grouped by host);
* ``all compacted``: ``sum:1m-avg:q.compact`` over the 24 h.

Before every round the cell count of every metric is checked (each row holds exactly the
cells loaded: nobody compacted or added anything). A warm-up round also checks that both
answer the same (same series, tags and timestamps, values equal to 1e-9 relative). Then
``--rounds`` rounds, the two daemons taking turns query by query. Printed: the p50 of
each, the ratio tsd / OpenTSDB, and tsd's client CPU (the daemon process's CPU seconds
over the query) per data cell the query's rows hold; and the CPU each query cost the daemon,
the HBase JVM and the Thrift gateway (all on the same cores, so a busy machine moves the
wall-clock figures more than these).

With ``--cluster``: the same on the pseudo-distributed cluster of ``scripts/hbase
cluster-start`` (``--region-servers``, two Thrift1 gateways, 512 MB heaps), tsd listing
``--gateways`` of them (its pool spreads the scans over them), OpenTSDB on the cluster's
ZooKeeper; the HBase side's CPU is every JVM's (ZooKeeper, master, region servers) and the
gateways'.

Run: ``python -m bench.hbase_query [--rounds N] [--cluster [--region-servers N]
[--gateways M]]``. Needs java and mvn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.hbase_ingest import (
    HBase,
    cpu_seconds,
    make_tables,
    progress,
    sides,
    start_cluster,
    start_hbase,
    start_tsd,
    tables,
)
from tests.hbase.opentsdb import running_opentsdb
from tsd.codec import KeyLayout, compact_row, encode_point, make_series_key
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.storage.base import Put
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings
from tsd.uid.service import UidService

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import aiohappybase

#: 2026-01-01T00:00:00Z: whole hours, long past (no daemon compacts them: both run without)
BASE = 1_767_225_600
HOUR = 3600
#: cells per mutate call when loading
LOAD_CHUNK = 20_000


@dataclass(frozen=True)
class Metric:
    name: str
    tags: list[list[tuple[str, str]]]  # per series
    hours: int
    step_s: int
    compacted: bool

    @property
    def points_per_row(self) -> int:
        return HOUR // self.step_s

    @property
    def cells_per_row(self) -> int:
        return 1 if self.compacted else self.points_per_row

    @property
    def cells(self) -> int:
        return len(self.tags) * self.hours * self.cells_per_row


def _single_tags() -> list[list[tuple[str, str]]]:
    return [[("host", f"h{h:03d}"), ("cpu", str(c))] for h in range(125) for c in range(8)]


METRICS = [
    Metric("q.single", _single_tags(), 1, 10, False),
    Metric("q.compact", _single_tags(), 24, 10, True),
    Metric(
        "q.wide",
        [[("host", f"h{h:05d}"), ("dc", "ab"[h % 2])] for h in range(10_000)],
        1,
        300,
        False,
    ),
]


@dataclass(frozen=True)
class Query:
    name: str
    metric: Metric
    params: str  # the /api/query query string
    hours: int
    #: the series whose cells the query needs (None: all of the metric's)
    series: int | None = None

    @property
    def cells(self) -> int:
        """Data cells in the rows the query needs."""
        count = len(self.metric.tags) if self.series is None else self.series
        return count * self.hours * self.metric.cells_per_row


def queries() -> list[Query]:
    single, compact, wide = METRICS
    one_hour = f"start={BASE}&end={BASE + HOUR - 1}"
    day = f"start={BASE}&end={BASE + 24 * HOUR - 1}"
    return [
        Query("all single", single, f"{one_hour}&m=sum:1m-avg:q.single", 1),
        Query("one series", single, f"{one_hour}&m=none:q.single{{host=h001,cpu=1}}", 1, 1),
        Query(
            "4 of 10,000",
            wide,
            f"{one_hour}&m=sum:q.wide{{host=h00001|h00002|h00003|h00004}}",
            1,
            8,  # upper bound: 4 hosts (each in one dc)
        ),
        Query("all compacted", compact, f"{day}&m=sum:1m-avg:q.compact", 24),
    ]


# -- loading ----------------------------------------------------------------------------------


async def load(cfg: StorageConfig) -> dict[str, bytes]:
    """Write every metric's cells; the metric name -> UID."""
    config = Config(core=CoreConfig(auto_create_metrics=True), storage=cfg)
    storage = HBaseStorage(hbase_settings(cfg))
    uids = UidService(storage, config)
    layout = KeyLayout.from_storage_config(cfg)
    metric_uids = {}
    try:
        for metric in METRICS:
            began = time.monotonic()
            metric_uid = await uids.metrics.get_or_create_id(metric.name)
            metric_uids[metric.name] = metric_uid
            puts: list[Put] = []
            for number, tags in enumerate(metric.tags):
                pairs = [
                    (await uids.tagk.get_or_create_id(k), await uids.tagv.get_or_create_id(v))
                    for k, v in tags
                ]
                key = make_series_key(layout, metric_uid, pairs)
                for hour in range(metric.hours):
                    base = BASE + hour * HOUR
                    cells = []
                    for i in range(metric.points_per_row):
                        ts = base + i * metric.step_s
                        value: int | float = (number * 7 + i) % 1000
                        if i % 3 == 1:
                            value = value + 0.5
                        _, qualifier, encoded = encode_point(ts, value)
                        cells.append((qualifier, encoded))
                    if metric.compacted:
                        compacted = compact_row(cells)
                        assert compacted is not None
                        cells = [compacted]
                    row = key.row_key(base)
                    puts.extend(Put(row, "t", q, v) for q, v in cells)
                if len(puts) >= LOAD_CHUNK:
                    await storage.mutate(cfg.data_table, puts)
                    puts = []
            if puts:
                await storage.mutate(cfg.data_table, puts)
            progress(
                f"loaded {metric.name}: {metric.cells:,} cells in {time.monotonic() - began:.0f} s"
            )
    finally:
        await storage.close()
    return metric_uids


async def rows_with_cell(cfg: StorageConfig, metric_uid: bytes, hours: int, nth: int) -> int:
    """Rows of the metric holding an ``nth`` cell (1-based): each comes back with that cell
    alone (ColumnPaginationFilter), so counting stays cheap."""
    conn = aiohappybase.Connection(cfg.thrift_host, cfg.thrift_port)
    await conn.open()
    try:
        table = conn.table(cfg.data_table)
        scan = table.scan(
            row_start=metric_uid + BASE.to_bytes(4, "big"),
            row_stop=metric_uid + (BASE + hours * HOUR).to_bytes(4, "big"),
            filter=f"ColumnPaginationFilter(1, {nth - 1})".encode(),
        )
        async with contextlib.aclosing(scan) as rows:
            return len([key async for key, _ in rows])
    finally:
        conn.close()


async def check_cells(cfg: StorageConfig, metric_uids: dict[str, bytes]) -> None:
    """Every row of every metric holds exactly the cells loaded."""
    for metric in METRICS:
        uid = metric_uids[metric.name]
        rows = len(metric.tags) * metric.hours
        full = await rows_with_cell(cfg, uid, metric.hours, metric.cells_per_row)
        more = await rows_with_cell(cfg, uid, metric.hours, metric.cells_per_row + 1)
        if full != rows or more:
            raise RuntimeError(
                f"{metric.name}: {full:,} of {rows:,} rows hold their {metric.cells_per_row} "
                f"cells, {more:,} hold more: the tables changed"
            )


# -- querying ---------------------------------------------------------------------------------


@dataclass
class Load:
    """The machine's 1-minute load average at the start of every round (other work on the
    same cores moves both daemons' figures: the rounds alternate so that it hits both)."""

    samples: list[float] = field(default_factory=list)

    def note(self) -> None:
        self.samples.append(os.getloadavg()[0])


@dataclass
class Timings:
    wall_ms: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # the daemon's
    hbase_cpu_s: list[float] = field(default_factory=list)  # the HBase JVM's
    thrift_cpu_s: list[float] = field(default_factory=list)  # the Thrift gateway's


async def ask(http: aiohttp.ClientSession, port: int, query: Query) -> tuple[float, Any]:
    """(wall ms, parsed answer) of one /api/query."""
    start = time.perf_counter()
    async with http.get(f"http://127.0.0.1:{port}/api/query?{query.params}") as reply:
        body = await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{query.name} on port {port}: {reply.status} {body[:300]!r}")
    return (time.perf_counter() - start) * 1000, orjson.loads(body)


def same_answer(mine: Any, theirs: Any) -> str | None:
    """None when both answers hold the same series and points; else what differs."""

    def key(series: dict[str, Any]) -> str:
        return orjson.dumps(
            [series["metric"], series["tags"], sorted(series["aggregateTags"])],
            option=orjson.OPT_SORT_KEYS,
        ).decode()

    a = {key(s): s["dps"] for s in mine}
    b = {key(s): s["dps"] for s in theirs}
    if a.keys() != b.keys():
        return f"series differ: {sorted(a)[:3]} vs {sorted(b)[:3]}"
    for name, dps in a.items():
        other = b[name]
        if dps.keys() != other.keys():
            return f"{name}: timestamps differ ({len(dps)} vs {len(other)})"
        for ts, value in dps.items():
            if not math.isclose(value, other[ts], rel_tol=1e-9, abs_tol=1e-12):
                return f"{name} at {ts}: {value} vs {other[ts]}"
    return None


async def measure(hbase: HBase, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cfg = tables(hbase.server, "bq_")
    await make_tables(cfg)
    metric_uids = await load(cfg)
    extra = {"tsd.storage.enable_compaction": "false", "tsd.core.meta.enable_tracking": "false"}
    gateways = {"tsd.storage.hbase.thrift.host": hbase.gateways(args.gateways)}
    process, tsd_port = await start_tsd(cfg, None, tmp / "tsd-data", gateways)
    timings: dict[tuple[str, str], Timings] = {}
    machine = Load()
    try:
        async with (
            running_opentsdb(hbase.server, cfg, tmp / "opentsdb", extra) as opentsdb,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http,
        ):
            daemons = [("tsd", tsd_port, process.pid), ("OpenTSDB", opentsdb.port, opentsdb.pid)]
            await check_cells(cfg, metric_uids)
            progress("warm-up")
            for query in queries():
                answers = [(await ask(http, port, query))[1] for _, port, _ in daemons]
                problem = same_answer(*answers)
                if problem is not None:
                    raise RuntimeError(f"{query.name}: answers differ: {problem}")
                if not answers[0]:
                    raise RuntimeError(f"{query.name}: empty answer")
            for number in range(args.rounds):
                await check_cells(cfg, metric_uids)
                machine.note()
                for query in queries():
                    order = daemons if number % 2 == 0 else daemons[::-1]
                    for who, port, pid in order:
                        watched = {"daemon": pid, **hbase.pids()}
                        before = {k: cpu_seconds(p) for k, p in watched.items()}
                        wall_ms, _ = await ask(http, port, query)
                        spent = {k: cpu_seconds(p) - before[k] for k, p in watched.items()}
                        t = timings.setdefault((query.name, who), Timings())
                        t.wall_ms.append(wall_ms)
                        t.cpu_s.append(spent["daemon"])
                        hbase_s, thrift_s = sides(spent)
                        t.hbase_cpu_s.append(hbase_s)
                        t.thrift_cpu_s.append(thrift_s)
                progress(f"round {number + 1} of {args.rounds} done")
            await check_cells(cfg, metric_uids)
            breakdown = {}
            for query in queries():
                shown = dataclasses.replace(query, params=query.params + "&show_summary=true")
                _, answer = await ask(http, tsd_port, shown)
                breakdown[query.name] = answer[-1].get("statsSummary", {})
    finally:
        process.terminate()
        await process.wait()
    return {"timings": timings, "breakdown": breakdown, "load": machine}


def report(found: dict[str, Any], args: argparse.Namespace) -> None:
    timings: dict[tuple[str, str], Timings] = found["timings"]
    load: Load = found["load"]
    where = (
        f"the cluster ({args.region_servers} region servers; tsd on {args.gateways} gateway(s))"
        if args.cluster
        else "a standalone HBase"
    )
    print(f"\nHBase queries on {where}, p50 of {args.rounds} alternating rounds (after a warm-up)")
    print(
        f"  machine: {os.cpu_count()} CPUs; 1-minute load average at the rounds' starts:"
        f" {min(load.samples):.1f} to {max(load.samples):.1f} (median"
        f" {statistics.median(load.samples):.1f})"
    )
    print(
        f"  {'query':14} {'cells':>9} {'OpenTSDB ms':>12} {'tsd ms':>9} {'tsd/OpenTSDB':>13}"
        f" {'tsd CPU us/cell':>16} {'ratio per round':>16}"
    )
    for query in queries():
        ours = timings[(query.name, "tsd")]
        theirs = timings[(query.name, "OpenTSDB")]
        p50_ours = statistics.median(ours.wall_ms)
        p50_theirs = statistics.median(theirs.wall_ms)
        cpu_per_cell = statistics.median(ours.cpu_s) / query.cells * 1e6
        # each round's own ratio (the two ran back to back): how far a single round strays
        per_round = [a / b for a, b in zip(ours.wall_ms, theirs.wall_ms, strict=True)]
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(
            f"  {query.name:14} {query.cells:9,} {p50_theirs:12.0f} {p50_ours:9.0f}"
            f" {p50_ours / p50_theirs:13.2f} {cpu_per_cell:16.2f} {spread:>16}"
        )
    # CPU is counted in clock ticks (10 ms): the small queries' figures are coarse.
    print("\n  CPU ms per query (p50): daemon + HBase JVM(s) + Thrift gateway(s) = all")
    for query in queries():
        cells = []
        for who in ("OpenTSDB", "tsd"):
            t = timings[(query.name, who)]
            parts = [t.cpu_s, t.hbase_cpu_s, t.thrift_cpu_s]
            p50s = [statistics.median(x) * 1000 for x in parts]
            total = statistics.median([sum(x) for x in zip(*parts, strict=True)]) * 1000
            cells.append(f"{who} {p50s[0]:.0f} + {p50s[1]:.0f} + {p50s[2]:.0f} = {total:.0f}")
        print(f"  {query.name:14} " + "; ".join(cells))


def report_breakdown(found: dict[str, Any]) -> None:
    """Where tsd's time went, from its showSummary (one more run of each query)."""
    keys = [
        ("readPath", "path"),
        ("rowsFromStorage", "rows"),
        ("columnsFromStorage", "cells"),
        ("keyOnlyRows", "key rows"),
        ("bytesFromStorage", "bytes"),
        ("decodeTime", "decode ms"),
    ]
    print("\n  tsd's showSummary: " + ", ".join(label for _, label in keys))
    for name, summary in found["breakdown"].items():
        values = []
        for key, _ in keys:
            value = summary.get(key, "-")
            values.append(
                f"{value:,.1f}"
                if isinstance(value, float)
                else f"{value:,}"
                if isinstance(value, int)
                else str(value)
            )
        print(f"  {name:14} " + ", ".join(values))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (at least 5)")
    parser.add_argument(
        "--cluster", action="store_true", help="on scripts/hbase's pseudo-distributed cluster"
    )
    parser.add_argument("--region-servers", type=int, default=2, help="with --cluster")
    parser.add_argument(
        "--gateways", type=int, default=2, help="with --cluster: Thrift1 gateways tsd lists"
    )
    args = parser.parse_args(argv)
    if shutil.which("java") is None or shutil.which("mvn") is None:
        sys.exit("needs java and mvn (Debian: openjdk-17-jdk-headless maven)")
    with tempfile.TemporaryDirectory(prefix="bench-hbase-query-") as tmp:
        if args.cluster:
            hbase = start_cluster(Path(tmp) / "hbase", args.region_servers, max(2, args.gateways))
        else:
            hbase = start_hbase(Path(tmp) / "hbase")
        progress(f"HBase started in {hbase.server.start_s:.0f} s")
        try:
            found = asyncio.run(measure(hbase, args, Path(tmp)))
        finally:
            hbase.stop()
    report(found, args)
    report_breakdown(found)


if __name__ == "__main__":
    main()
