"""Ingest into HBase: tsd (telnet) beside a bare mutateRows writer and OpenTSDB 2.4.1.

One standalone HBase (``scripts/hbase``, free ports, a temporary directory, stopped at the
end) serves four writers, each on its own set of OpenTSDB's tables:

* **tsd**: ``python -m tsd tsd`` with the hbase backend in a subprocess, fed telnet put
  lines over ``--connections`` sockets. Done when ``tsd.datapoints.stored`` (points whose
  batch HBase acknowledged) reaches the total. Compaction is off (nothing to compact
  during a run; see BASE_TS).
* **bare**: the ceiling of tsd's path: the same cells, encoded beforehand and grouped as
  tsd's writer groups them (batches of ``DEFAULT_MAX_CELLS`` sorted by row, split into
  ``mutateRows`` calls of ``MAX_STEP_CELLS``, ``max_in_flight`` calls at a time), sent
  through aiohappybase's Thrift client from this process; done when the last call
  returns. Twice: with the Thrift encoder tsd uses (thriftpy2's compiled cybin, see
  tsd/storage/hbase/pool.py) and with aiohappybase's own pure-Python one.
* **OpenTSDB**: 2.4.1's TSDMain (tests/hbase/opentsdb.py), the same telnet lines. It
  talks to the region server directly (asynchbase), not through the Thrift gateway.
  Done when ``tsd.datapoints.added`` reaches the total and HBase holds every cell
  (OpenTSDB counts a point when it hands it to its client's buffer; ``rows_complete``).

Each writer gets a warm-up (``--warmup`` points per series: UIDs assigned, JIT warm),
then ``--repeat`` timed rounds of ``--points``, the writers taking turns so that all see
the same machine load; the best round of each is kept. After every round the table is
checked to hold exactly the points sent. Rates are points per wall-clock second; CPU
seconds of each process over the round (tsd, this process, HBase's JVM, the Thrift
gateway, OpenTSDB) show where the time goes on a machine where all of them share cores.

Also printed: the cost of encoding one 1,000-cell ``mutateRows`` call with the
pure-Python Thrift binary protocol, against thriftpy2's compiled one (cybin).

With ``--cluster``, on the pseudo-distributed cluster of ``scripts/hbase cluster-start``
(``--region-servers`` region servers, two Thrift1 gateways, 512 MB heaps) instead: tsd as 1,
2 and 3 daemons on one set of tables (the lines dealt out between them) with 1 and 2
gateways listed, and OpenTSDB on the cluster's ZooKeeper; no bare writers. Also printed:
points per CPU-second of the region servers, of the gateways, of the whole HBase side and
of the writer (what each would carry with a core of its own).

Run: ``python -m bench.hbase_ingest [--points N] [--series S] [--connections C]
[--repeat R] [--no-opentsdb] [--profile-tsd FILE] [--cluster [--region-servers N]]``.
Needs java and mvn (as the HBase tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.hbase.opentsdb import running_opentsdb, tsd_hbase_keys
from tests.hbase_harness import HBaseServer
from tsd.codec import KeyLayout, base_time_for, encode_point, make_series_key
from tsd.config import StorageConfig
from tsd.storage.hbase import HBaseStorage
from tsd.storage.hbase.batches import MAX_STEP_CELLS
from tsd.storage.hbase.pool import HBASE_THRIFT, PROTOCOLS
from tsd.storage_setup import hbase_settings
from tsd.tools.create_tables import create_tables
from tsd.write.batch import DEFAULT_MAX_CELLS
from tsd.write.batch_writer import WriterLimits

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import aiohappybase

#: tsd's binary protocol (cybin writes), offered to aiohappybase's Connection under this name
COMPILED_PROTOCOL = "binary-cybin"
aiohappybase.Connection.THRIFT_PROTOCOLS[COMPILED_PROTOCOL] = PROTOCOLS["binary"]

ROOT = Path(__file__).resolve().parent.parent
#: Points start now (and run into the next minutes): OpenTSDB's compaction queue leaves
#: rows alone until their hour is over by an hour, and tsd runs with compaction off, so the
#: cells stay as written and nobody compacts during the run.
BASE_TS = int(time.time())
CHUNK = 64 * 1024
METRIC = "hb.cpu"
#: the bare writer's made-up metric UID (it writes no UID rows)
BARE_METRIC_UID = b"\x00\x00\x01"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- HBase ------------------------------------------------------------------------------------


@dataclass
class HBase:
    server: HBaseServer
    env: dict[str, str]
    var_dir: Path
    #: the pseudo-distributed cluster (``scripts/hbase cluster-start``): its Thrift1 ports
    cluster_thrift_ports: list[int] = field(default_factory=list)

    @property
    def cluster(self) -> bool:
        return bool(self.cluster_thrift_ports)

    def pids(self) -> dict[str, int]:
        """Standalone: the HBase JVM (master, region server, ZooKeeper) as ``hbase`` and the
        Thrift gateway as ``thrift``. The cluster: every JVM by its name (``zk``,
        ``master``, ``rs0``..., ``thrift0``..., ``thrift2``); :func:`sides` adds them up."""
        if self.cluster:
            return {
                path.stem: int(path.read_text())
                for path in sorted(self.var_dir.glob("*.pid"))
                if path.stem != "watch"
            }
        return {
            name: int((self.var_dir / f"{pid}.pid").read_text())
            for name, pid in (("hbase", "master"), ("thrift", "thrift"))
        }

    def gateways(self, count: int) -> str:
        """``tsd.storage.hbase.thrift.host`` for the first ``count`` Thrift1 gateways."""
        ports = self.cluster_thrift_ports[:count] or [self.server.thrift_port]
        return ",".join(f"127.0.0.1:{port}" for port in ports)

    def stop(self) -> None:
        command = "cluster-stop" if self.cluster else "stop"
        subprocess.run([str(ROOT / "scripts" / "hbase"), command], env=self.env, check=False)


def sides(spent: dict[str, float]) -> tuple[float, float]:
    """CPU seconds of the HBase side, split in (ZooKeeper, master and region servers;
    Thrift gateways), from :meth:`HBase.pids`' names (other processes left out)."""
    jvms = ("hbase", "zk", "master")
    hbase = sum(s for who, s in spent.items() if who in jvms or who.startswith("rs"))
    thrift = sum(s for who, s in spent.items() if who.startswith("thrift"))
    return hbase, thrift


def start_hbase(var_dir: Path, thrift_info_port: int | None = None) -> HBase:
    """A standalone HBase; ``thrift_info_port``: the gateway's info server (its /jmx
    counters) on that loopback port (off by default)."""
    env = {
        **os.environ,
        "TSD_HBASE_VAR": str(var_dir),
        "TSD_HBASE_ZK_PORT": str(free_port()),
        "TSD_HBASE_THRIFT_PORT": str(free_port()),
        "TSD_HBASE_WATCH_PID": str(os.getpid()),
    }
    if thrift_info_port is not None:
        env["TSD_HBASE_THRIFT_ARGS"] = f"--infoport {thrift_info_port}"
    began = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / "hbase"), "start"], env=env, check=True)
    server = HBaseServer(
        "127.0.0.1",
        int(env["TSD_HBASE_THRIFT_PORT"]),
        int(env["TSD_HBASE_ZK_PORT"]),
        var_dir,
        True,
        time.monotonic() - began,
    )
    return HBase(server, env, var_dir)


#: each cluster JVM's heap in the benches: the tests' 256 MB let a region server die of an
#: OutOfMemoryError under 300,000-point rounds into seven tables (its memstores blocked over
#: the high-water mark); TSD_HBASE_HEAP overrides
BENCH_CLUSTER_HEAP = "512m"


def start_cluster(var_dir: Path, region_servers: int = 2, gateways: int = 2) -> HBase:
    """The pseudo-distributed cluster of ``scripts/hbase cluster-start`` on free ports
    (BENCH_CLUSTER_HEAP heaps): ZooKeeper, a master, ``region_servers`` region servers,
    ``gateways`` Thrift1 gateways and a Thrift2 gateway, each its own JVM."""
    thrift_ports = [free_port() for _ in range(gateways)]
    env = {
        "TSD_HBASE_HEAP": BENCH_CLUSTER_HEAP,
        **os.environ,
        "TSD_HBASE_VAR": str(var_dir),
        "TSD_HBASE_ZK_PORT": str(free_port()),
        "TSD_HBASE_MASTER_PORT": str(free_port()),
        "TSD_HBASE_RS_PORTS": ",".join(str(free_port()) for _ in range(region_servers)),
        "TSD_HBASE_THRIFT_PORTS": ",".join(map(str, thrift_ports)),
        "TSD_HBASE_THRIFT2_PORT": str(free_port()),
        "TSD_HBASE_WATCH_PID": str(os.getpid()),
    }
    began = time.monotonic()
    subprocess.run([str(ROOT / "scripts" / "hbase"), "cluster-start"], env=env, check=True)
    server = HBaseServer(
        "127.0.0.1",
        thrift_ports[0],
        int(env["TSD_HBASE_ZK_PORT"]),
        var_dir,
        True,
        time.monotonic() - began,
    )
    return HBase(server, env, var_dir, thrift_ports)


def tables(server: HBaseServer, prefix: str) -> StorageConfig:
    return server.storage_config(
        data_table=f"{prefix}tsdb",
        uid_table=f"{prefix}tsdb-uid",
        tree_table=f"{prefix}tsdb-tree",
        meta_table=f"{prefix}tsdb-meta",
    )


async def make_tables(cfg: StorageConfig) -> None:
    storage = HBaseStorage(hbase_settings(cfg))
    try:
        await create_tables(storage, cfg)
    finally:
        await storage.close()


# -- the load ---------------------------------------------------------------------------------


def point(i: int, offset: int, series: int) -> tuple[int, int, int]:
    """Point i of a run: (series number, timestamp, value)."""
    return i % series, BASE_TS + (offset + i) // series, i


def telnet_lines(count: int, offset: int, series: int) -> list[bytes]:
    lines = []
    for i in range(count):
        s, ts, value = point(i, offset, series)
        lines.append(
            b"put %s %d %d host=h%d dc=lga cpu=%d\n" % (METRIC.encode(), ts, value, s, s % 8)
        )
    return lines


def chunks_per_connection(lines: list[bytes], connections: int) -> list[list[bytes]]:
    per = []
    for n in range(connections):
        data = b"".join(lines[n::connections])
        per.append([data[i : i + CHUNK] for i in range(0, len(data), CHUNK)])
    return per


async def send_telnet(port: int, chunks: list[bytes]) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def send_lines(port: int, lines: list[bytes], connections: int) -> None:
    per = chunks_per_connection(lines, connections)
    await asyncio.gather(*(send_telnet(port, chunks) for chunks in per))


async def stat(http: aiohttp.ClientSession, port: int, metric: str) -> int:
    async with http.get(f"http://127.0.0.1:{port}/api/stats") as reply:
        records = orjson.loads(await reply.read())
    return sum(int(r["value"]) for r in records if r["metric"] == metric)


async def wait_for(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    points: int
    wall_s: float
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.points / self.wall_s


async def timed(
    name: str, points: int, pids: dict[str, int], run: Callable[[], Awaitable[None]]
) -> Result:
    """Wall time of ``run`` and the CPU seconds each process in ``pids`` spent meanwhile."""
    cpu_before = {who: cpu_seconds(pid) for who, pid in pids.items()}
    start = time.perf_counter()
    await run()
    wall = time.perf_counter() - start
    cpu = {who: cpu_seconds(pid) - cpu_before[who] for who, pid in pids.items()}
    progress(f"{name}: {points / wall:,.0f} points/s")
    return Result(name, points, wall, cpu)


async def start_tsd(
    cfg: StorageConfig,
    profile: str | None,
    data_dir: Path,
    extra: dict[str, str] | None = None,
    port: int = 0,
) -> tuple[asyncio.subprocess.Process, int]:
    """``tsdb tsd`` on ``cfg``'s tables, its write-ahead log in ``data_dir`` (never the
    default ./data, which a daemon of the user's may hold); ``extra``: more keys;
    ``port``: its port (0: any free one)."""
    keys = {**tsd_hbase_keys(cfg, data_dir), "tsd.logging.format": "json", **(extra or {})}
    settings = [arg for key, value in keys.items() for arg in ("--set", f"{key}={value}")]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *(["-m", "cProfile", "-o", profile] if profile else []),
        *["-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", str(port)],
        *["--auto-metric", *settings],
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    while line := await process.stderr.readline():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "daemon.started":
                asyncio.ensure_future(process.stderr.read())  # keep draining its log
                return process, int(event["port"])
    raise RuntimeError("tsd did not start")


#: one timed round of a writer: round number -> its result
Round = Callable[[int], Awaitable[Result]]


@contextlib.asynccontextmanager
async def tsd_writer(
    hbase: HBase, args: argparse.Namespace, tsds: int = 1, gateways: int = 1
) -> AsyncIterator[Round]:
    """``tsds`` tsd processes on one set of tables, each listing the first ``gateways``
    Thrift1 gateways, the lines dealt out between them (every tsd its share of each series,
    as a load balancer in front spreads connections), ``--connections`` sockets each."""
    shape = "" if tsds == gateways == 1 and not hbase.cluster else f"{tsds}t{gateways}g_"
    cfg = tables(hbase.server, f"bench_tsd_{shape}")
    await make_tables(cfg)
    extra = {"tsd.storage.hbase.thrift.host": hbase.gateways(gateways)}
    daemons = [
        await start_tsd(
            cfg,
            args.profile_tsd if n == 0 else None,
            hbase.var_dir.parent / f"tsd-data-{shape}{n}",
            extra,
        )
        for n in range(tsds)
    ]
    name = "tsd (telnet)"
    if hbase.cluster:
        name = f"tsd x{tsds}, {gateways} gateway{'s' * (gateways > 1)}"
    warm = args.warmup * args.series
    try:
        async with aiohttp.ClientSession() as http:

            async def stored(target: int) -> bool:
                counts = [await stat(http, port, "tsd.datapoints.stored") for _, port in daemons]
                return sum(counts) >= target

            async def send(lines: list[bytes]) -> None:
                await asyncio.gather(
                    *(
                        send_lines(port, lines[n::tsds], args.connections)
                        for n, (_, port) in enumerate(daemons)
                    )
                )

            await send(telnet_lines(warm, 0, args.series))
            await wait_for(lambda: stored(warm), "tsd warm-up")

            async def one_round(number: int) -> Result:
                offset = warm + number * args.points
                lines = telnet_lines(args.points, offset, args.series)
                total = offset + args.points

                async def run() -> None:
                    await send(lines)
                    await wait_for(lambda: stored(total), "tsd stored every point")

                pids = {
                    **{f"tsd{n}" if tsds > 1 else "tsd": p.pid for n, (p, _) in enumerate(daemons)},
                    **hbase.pids(),
                }
                result = await timed(name, args.points, pids, run)
                await check_cells(cfg, total, args.series, name)
                return result

            yield one_round
    finally:
        for process, _ in daemons:
            process.terminate()
        for process, _ in daemons:
            await process.wait()


def bare_calls(count: int, offset: int, series: int) -> list[list[Any]]:
    """The points' cells as tsd's writer would send them: batches of DEFAULT_MAX_CELLS,
    sorted by row and qualifier, split into mutateRows calls of MAX_STEP_CELLS cells."""
    layout = KeyLayout()
    metric = BARE_METRIC_UID
    keys = [
        make_series_key(
            layout,
            metric,
            [
                (b"\x00\x00\x01", (1 + s).to_bytes(3, "big")),  # host
                (b"\x00\x00\x02", b"\x00\x00\x00"),  # dc
                (b"\x00\x00\x03", (1 + series + s % 8).to_bytes(3, "big")),  # cpu
            ],
        )
        for s in range(series)
    ]
    calls: list[list[Any]] = []
    for start in range(0, count, DEFAULT_MAX_CELLS):
        cells = []
        for i in range(start, min(count, start + DEFAULT_MAX_CELLS)):
            s, ts, value = point(i, offset, series)
            base, qualifier, encoded = encode_point(ts, value)
            cells.append((keys[s].row_key(base), b"t:" + qualifier, encoded))
        cells.sort()
        for step in range(0, len(cells), MAX_STEP_CELLS):
            rows: dict[bytes, list[Any]] = {}
            for row, column, cell in cells[step : step + MAX_STEP_CELLS]:
                rows.setdefault(row, []).append(HBASE_THRIFT.Mutation(column=column, value=cell))
            calls.append(
                [HBASE_THRIFT.BatchMutation(row=row, mutations=ops) for row, ops in rows.items()]
            )
    return calls


@contextlib.asynccontextmanager
async def bare_writer(
    hbase: HBase, args: argparse.Namespace, compiled: bool
) -> AsyncIterator[Round]:
    """``compiled``: encode with tsd's protocol (cybin), else aiohappybase's pure-Python one."""
    name = "bare, cybin encoding" if compiled else "bare, pure-Python enc."
    cfg = tables(hbase.server, "bench_cybin_" if compiled else "bench_bare_")
    await make_tables(cfg)
    table = cfg.data_table.encode()
    warm = args.warmup * args.series

    async def send(calls: Sequence[list[Any]]) -> None:
        """On fresh connections (the gateway drops idle ones while the others take turns),
        one per write tsd's writer keeps in flight."""
        connections = [
            aiohappybase.Connection(
                cfg.thrift_host,
                cfg.thrift_port,
                protocol=COMPILED_PROTOCOL if compiled else "binary",
            )
            for _ in range(WriterLimits().max_in_flight)
        ]
        queue = list(reversed(calls))

        async def sender(conn: Any) -> None:
            await conn.open()
            try:
                while queue:
                    await conn.client.mutateRows(table, queue.pop(), {})
            finally:
                conn.close()

        await asyncio.gather(*(sender(conn) for conn in connections))

    async def one_round(number: int) -> Result:
        offset = warm + number * args.points
        calls = bare_calls(args.points, offset, args.series)
        pids = {"this process": os.getpid(), **hbase.pids()}
        result = await timed(name, args.points, pids, lambda: send(calls))
        total = offset + args.points
        await check_cells(cfg, total, args.series, "bare writer", BARE_METRIC_UID)
        return result

    await send(bare_calls(warm, 0, args.series))
    yield one_round


@contextlib.asynccontextmanager
async def opentsdb_writer(
    hbase: HBase, args: argparse.Namespace, workdir: Path
) -> AsyncIterator[Round]:
    cfg = tables(hbase.server, "bench_otsdb_")
    await make_tables(cfg)
    warm = args.warmup * args.series
    async with (
        running_opentsdb(hbase.server, cfg, workdir) as opentsdb,
        aiohttp.ClientSession() as http,
    ):

        async def added(target: int) -> bool:
            return await stat(http, opentsdb.port, "tsd.datapoints.added") >= target

        async def in_hbase(points: int) -> bool:
            return await rows_complete(cfg, points, args.series)

        await send_lines(opentsdb.port, telnet_lines(warm, 0, args.series), args.connections)
        await wait_for(lambda: added(warm), "OpenTSDB warm-up")
        await wait_for(lambda: in_hbase(warm), "OpenTSDB warm-up in HBase")

        async def one_round(number: int) -> Result:
            offset = warm + number * args.points
            lines = telnet_lines(args.points, offset, args.series)
            total = offset + args.points

            async def run() -> None:
                await send_lines(opentsdb.port, lines, args.connections)
                await wait_for(lambda: added(total), "OpenTSDB counted every point")
                await wait_for(lambda: in_hbase(total), "OpenTSDB's points in HBase")

            pids = {"OpenTSDB": opentsdb.pid, **hbase.pids()}
            result = await timed("OpenTSDB 2.4.1 (telnet)", args.points, pids, run)
            await check_cells(cfg, total, args.series, "OpenTSDB")
            return result

        yield one_round


async def rows_complete(
    cfg: StorageConfig, points: int, series: int, metric_uid: bytes | None = None
) -> bool:
    """Whether the first ``points`` points of a run are all in HBase, cheaply enough to poll.

    Every series gets the same timestamps (``points`` is a multiple of ``series``), so the
    rows of one hour all hold the same number of cells, c. Per hour, a scan with
    ``ColumnPaginationFilter(1, c - 1)`` returns one cell for each row that has its c-th
    cell: the hour is complete when that is one row per series. (Counting every cell
    through Thrift would take seconds, most of it decoding replies in Python.)
    """
    rows = await rows_holding(cfg, points, series, 0, metric_uid)
    return rows == series * len(hours(points, series))


def hours(points: int, series: int) -> Counter[int]:
    """Base time -> cells per row, for the first ``points`` points of a run."""
    return Counter(base_time_for(point(j * series, 0, series)[1]) for j in range(points // series))


async def rows_holding(
    cfg: StorageConfig, points: int, series: int, extra: int, metric_uid: bytes | None
) -> int:
    """Rows holding at least ``extra`` more cells than the first ``points`` points put there;
    the metric's UID is read from the UID table unless given."""
    storage = HBaseStorage(hbase_settings(cfg))
    conn = aiohappybase.Connection(cfg.thrift_host, cfg.thrift_port)
    try:
        metric = metric_uid
        if metric is None:
            found = await storage.get(cfg.uid_table, METRIC.encode(), ("id",))
            if found is None:
                return 0
            metric = next(c.value for c in found.cells if c.qualifier == b"metrics")
        await conn.open()
        table = conn.table(cfg.data_table)
        total = 0
        for base, cells in hours(points, series).items():
            scan = table.scan(
                row_start=metric + base.to_bytes(4, "big"),
                row_stop=metric + (base + 1).to_bytes(4, "big"),
                filter=f"ColumnPaginationFilter(1, {cells + extra - 1})".encode(),
            )
            async with contextlib.aclosing(scan) as rows:
                total += len([key async for key, _ in rows])
        return total
    finally:
        conn.close()
        await storage.close()


async def check_cells(
    cfg: StorageConfig, points: int, series: int, who: str, metric_uid: bytes | None = None
) -> None:
    """Every row holds exactly the cells of the run's points."""
    complete = await rows_complete(cfg, points, series, metric_uid)
    if not complete or await rows_holding(cfg, points, series, 1, metric_uid):
        raise RuntimeError(f"{who}: HBase does not hold exactly the {points:,} points sent")


# -- Thrift encoding cost ---------------------------------------------------------------------


def encoding_cost(cells: int = 1000, rounds: int = 50) -> tuple[float, float | None]:
    """Milliseconds to encode one ``mutateRows`` call of ``cells`` cells: the pure-Python
    binary protocol (what aiohappybase uses) and thriftpy2's compiled cybin (None if absent)."""
    call = bare_calls(cells, 0, max(1, cells // 50))[0]
    args = HBASE_THRIFT.Hbase.mutateRows_args(tableName=b"tsdb", rowBatches=call, attributes={})

    def per_call(protocol: Any, buffer: Any) -> float:
        start = time.perf_counter()
        for _ in range(rounds):
            out = buffer()
            protocol(out).write_struct(args)
            out.getvalue()
        return (time.perf_counter() - start) / rounds * 1000

    binary: Any = importlib.import_module("thriftpy2.protocol.binary")
    memory: Any = importlib.import_module("thriftpy2.transport.memory")
    pure = per_call(binary.TBinaryProtocol, memory.TMemoryBuffer)
    try:
        cybin: Any = importlib.import_module("thriftpy2.protocol.cybin")
    except ImportError:
        return pure, None
    return pure, per_call(cybin.TCyBinaryProtocol, memory.TCyMemoryBuffer)


# -- main -------------------------------------------------------------------------------------


def report(results: list[Result], args: argparse.Namespace) -> None:
    tsd = next(r for r in results if r.name.startswith("tsd"))
    shape = f"{args.points:,} points over {args.series:,} series, {args.connections} connections"
    warm = args.warmup * args.series
    where = "the cluster" if args.cluster else "a standalone HBase"
    print(
        f"\nHBase ingest on {where}: {shape}; warm-up {warm:,} points each, best of {args.repeat}"
    )
    print(f"  {'writer':26} {'points/s':>10} {'wall s':>7} {'tsd/it':>7}   CPU s during the run")
    for r in results:
        cpu = ", ".join(f"{who} {s:.1f}" for who, s in r.cpu_s.items())
        ratio = f"{tsd.rate / r.rate:7.2f}" if r is not tsd else " " * 7
        print(f"  {r.name:26} {r.rate:10,.0f} {r.wall_s:7.2f} {ratio}   {cpu}")
    # per CPU-second: what each side would carry if it had a core of its own
    print(
        f"\n  {'writer':26} {'points per CPU-second of:':>26} {'region servers':>15}"
        f" {'gateways':>9} {'HBase side':>11} {'writer':>8}"
    )
    for r in results:
        hbase, thrift = sides(r.cpu_s)
        servers = sum(s for who, s in r.cpu_s.items() if who.startswith("rs") or who == "hbase")
        writer = sum(s for who, s in r.cpu_s.items() if who.startswith(("tsd", "OpenTSDB")))
        figures = [r.points / s if s > 0 else math.inf for s in (servers, thrift, hbase + thrift)]
        figures.append(r.points / writer if writer > 0 else math.inf)
        print(
            f"  {r.name:26} {'':26} {figures[0]:15,.0f} {figures[1]:9,.0f}"
            f" {figures[2]:11,.0f} {figures[3]:8,.0f}"
        )
    pure, compiled = encoding_cost()
    line = f"  encoding one 1,000-cell mutateRows: pure-Python binary {pure:.2f} ms"
    if compiled is not None:
        line += f", cybin {compiled:.2f} ms ({pure / compiled:.0f}x)"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--series", type=int, default=1_000)
    parser.add_argument("--warmup", type=int, default=20, help="points per series first")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="rounds per writer, best kept")
    parser.add_argument("--no-opentsdb", action="store_true")
    parser.add_argument("--profile-tsd", metavar="FILE", help="run tsd under cProfile into FILE")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on scripts/hbase's pseudo-distributed cluster: tsd with 1, 2 and 3 daemons and"
        " 1 and 2 gateways, and OpenTSDB (no bare writers)",
    )
    parser.add_argument("--region-servers", type=int, default=2, help="with --cluster")
    args = parser.parse_args()
    if args.points % args.series:
        parser.error("--points must be a multiple of --series (every series gets the same times)")
    if shutil.which("java") is None or shutil.which("mvn") is None:
        sys.exit("needs java and mvn (Debian: openjdk-17-jdk-headless maven)")

    with tempfile.TemporaryDirectory(prefix="bench-hbase-") as tmp:
        if args.cluster:
            hbase = start_cluster(Path(tmp) / "hbase", args.region_servers)
        else:
            hbase = start_hbase(Path(tmp) / "hbase")
        print(f"HBase started in {hbase.server.start_s:.0f} s")
        try:

            async def measure() -> list[Result]:
                best: dict[str, Result] = {}
                async with contextlib.AsyncExitStack() as stack:
                    if args.cluster:
                        writers = [
                            await stack.enter_async_context(tsd_writer(hbase, args, t, g))
                            for t in (1, 2, 3)
                            for g in (1, 2)
                        ]
                    else:
                        writers = [
                            await stack.enter_async_context(tsd_writer(hbase, args)),
                            await stack.enter_async_context(bare_writer(hbase, args, True)),
                            await stack.enter_async_context(bare_writer(hbase, args, False)),
                        ]
                    if not args.no_opentsdb:
                        writer = opentsdb_writer(hbase, args, Path(tmp))
                        writers.append(await stack.enter_async_context(writer))
                    for number in range(args.repeat):  # alternate: all see the same load
                        for one_round in writers:
                            result = await one_round(number)
                            if result.name not in best or result.rate > best[result.name].rate:
                                best[result.name] = result
                return list(best.values())

            results = asyncio.run(measure())
        finally:
            hbase.stop()
    report(results, args)


if __name__ == "__main__":
    main()
