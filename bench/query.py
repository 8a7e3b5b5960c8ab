"""Query latency: ``sum:1m-avg`` over a day of data through the whole engine, against a
numpy-only computation of the same answer over the same arrays.

A day of ``--series`` series (default 1,000) at ``--step`` seconds (default 10: 8,640 points
per series) is written through the real write path (ingest service, writer, in-memory head,
all settings at their defaults: no log, as ``tsdb import`` writes), hour after hour, and
queried warm ``--repeat`` times right after loading ("fresh": what a dashboard or a
backfill sees; rows whose hour closed and that got no point for
``tsd.storage.head.grace`` may meanwhile have been written out, and the run says how many
were still in the head); then every row is written out (one compacted cell per row) and
queried again. The baseline takes the same values as numpy arrays already
in memory and computes the 1-minute averages and their sum: no storage, no decoding, no
grouping; the ratio is what reading OpenTSDB's format from a store costs on top. Both
answers are checked equal before timing. Also reported: the engine's phases on the
compacted data (scan + decode, assemble, aggregate) and the decode rate.

Baseline two, when Debian's ``victoria-metrics`` is installed: the same values imported
into VictoriaMetrics (``/api/v1/import``) and the equivalent MetricsQL query
``sum(avg_over_time(bench_cpu[1m]))`` at a 60 s step over the day, result cache off
(``nocache=1``), timed over HTTP on 127.0.0.1 (both use both CPUs).

Also, with ``--size``: the embedded file's bytes per point after loading 1,000 series x 6
hours at 10 s (2.16 M points) through the write path and closing it (issue 9: <= 25).

Run: ``python -m bench.query [--series N] [--step S] [--repeat N] [--no-vm] [--size]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import orjson

from tsd.codec import KeyLayout
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.model import make_tags
from tsd.protocol.query_json import parse_query_params
from tsd.query.decode import decode_block
from tsd.query.engine import QueryEngine
from tsd.query.output import QueryResult, SeriesResult
from tsd.query.plan import plan_metric_scan, scan_window_s
from tsd.query.results import aggregate_groups
from tsd.query.series import AggregatedSeries
from tsd.query.spans import assemble_spans
from tsd.query_model import SubQuery, TSQuery
from tsd.schema import ensure_tables
from tsd.server.http.render import render_query_result
from tsd.stats import StatsRegistry
from tsd.storage.base import Block, Storage
from tsd.storage.embedded import EmbeddedStorage
from tsd.uid.service import UidService
from tsd.write.head_flush import build_head_sink
from tsd.write.ingest import IngestService
from tsd.write.writer import Writer

BASE = 1356998400  # 2013-01-01 00:00:00 UTC
DAY = 86400
METRIC = "bench.cpu"


def make_values(n_series: int, n_points: int, seed: int = 3) -> npt.NDArray[np.float64]:
    """Random walks with two decimals: realistic doubles (8-byte values)."""
    rng = np.random.default_rng(seed)
    steps = np.round(rng.normal(0, 1, size=(n_series, n_points)), 2)
    return np.asarray(np.round(50 + np.cumsum(steps, axis=1), 2), dtype=np.float64)


async def load(
    storage: Storage, cfg: Config, values: npt.NDArray[np.float64], step: int
) -> tuple[Writer, int]:
    """Every point through the ingest service and the writer (into the head), an hour of
    every series after the other, honouring back-pressure; the started writer (the head's
    write-out running as in the daemon) and the rows written."""
    registry = StatsRegistry()
    sink = build_head_sink(storage, cfg.storage, registry, wal=None, wall_clock=time.time)
    writer = Writer(storage, cfg.storage, registry, head=sink)
    writer.start()
    ingest = IngestService(writer, UidService(storage, cfg), cfg.storage)
    n_series, n_points = values.shape
    refs = [await ingest.resolve(METRIC, make_tags({"host": f"h{s:05d}"})) for s in range(n_series)]
    per_hour = 3600 // step
    stamps = (BASE + np.arange(n_points) * step).tolist()
    rows = 0
    for hour in range(n_points // per_hour):
        span = slice(hour * per_hour, (hour + 1) * per_hour)
        for s, ref in enumerate(refs):
            row = values[s, span].tolist()
            points = [(ref, t, v) for t, v in zip(stamps[span], row, strict=True)]
            while points:
                if writer.is_full():
                    await writer.wait_writable()
                room = max(1, writer.room())
                writer.add_points(points[:room])
                points = points[room:]
            rows += 1
        await asyncio.sleep(0)
    await writer.flush()
    return writer, rows


async def store_size(tmp: Path) -> tuple[int, int]:
    """(bytes of the embedded file, points) after 1,000 series x 6 h at 10 s went through
    the write path and the writer was closed (its head written out)."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True), storage=StorageConfig(data_dir=str(tmp))
    )
    storage = EmbeddedStorage(tmp)
    try:
        await ensure_tables(storage, cfg.storage)
        values = make_values(1000, 6 * 360)
        writer, _ = await load(storage, cfg, values, 10)
        await writer.close()
    finally:
        await storage.close()
    return _disk_bytes(tmp), values.size


def _disk_bytes(directory: Path) -> int:
    """Bytes the files under ``directory`` take on disk (allocated blocks)."""
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def victoria_with(
    values: npt.NDArray[Any], step: int, metric: str
) -> AsyncIterator[tuple[aiohttp.ClientSession, str, Path] | None]:
    """A VictoriaMetrics in a temporary directory holding ``values`` (one series per row,
    host h00000...) as ``metric``, flushed: (session, base URL, data directory), or None
    without the binary."""
    binary = shutil.which("victoria-metrics")
    if binary is None:
        yield None
        return
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="tsd-bench-vm-") as data:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"-storageDataPath={data}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",  # the data is from 2013
            "-loggerLevel=ERROR",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                await _wait_for(session, f"{base}/health")
                stamps = ((BASE + np.arange(values.shape[1]) * step) * 1000).tolist()
                for start in range(0, values.shape[0], 50):
                    lines = b"\n".join(
                        orjson.dumps(
                            {
                                "metric": {"__name__": metric, "host": f"h{s:05d}"},
                                "values": values[s].tolist(),
                                "timestamps": stamps,
                            }
                        )
                        for s in range(start, min(start + 50, values.shape[0]))
                    )
                    async with session.post(f"{base}/api/v1/import", data=lines) as reply:
                        assert reply.status == 204, await reply.text()
                async with session.get(f"{base}/internal/force_flush"):
                    pass
                yield session, base, Path(data)
        finally:
            process.terminate()
            await process.wait()


async def victoria_metrics(
    values: npt.NDArray[np.float64], step: int, repeat: int
) -> tuple[float, int] | None:
    """(p50 seconds of the equivalent query, points answered), or None without the binary."""
    async with victoria_with(values, step, "bench_cpu") as found:
        if found is None:
            return None
        session, base, _ = found
        params = {
            "query": "sum(avg_over_time(bench_cpu[1m]))",
            "start": str(BASE + 60),
            "end": str(BASE + DAY),
            "step": "60",
            "nocache": "1",
        }
        url = f"{base}/api/v1/query_range"
        points = 0
        for _ in range(50):  # until the imported data is searchable
            async with session.get(url, params=params) as reply:
                result = (await reply.json())["data"]["result"]
            points = len(result[0]["values"]) if result else 0
            if points >= DAY // 60 - 1:
                break
            await asyncio.sleep(0.2)
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            async with session.get(url, params=params) as reply:
                await reply.read()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples), points


async def _wait_for(session: aiohttp.ClientSession, url: str) -> None:
    for _ in range(200):
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as reply:
                if reply.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise RuntimeError("victoria-metrics did not start")


def reference(values: npt.NDArray[np.float64], step: int) -> npt.NDArray[np.float64]:
    """sum across series of the 1-minute averages, numpy only."""
    per_minute = 60 // step
    minutes = values.reshape(values.shape[0], -1, per_minute).mean(axis=2)
    return np.asarray(minutes.sum(axis=0), dtype=np.float64)


async def timed(repeat: int, fn: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(p50 wall seconds, p50 process CPU seconds, all threads): on a shared machine the
    CPU time is the steadier figure."""
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        await fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


async def loop_stall(fn: Callable[[], Awaitable[object]]) -> float:
    """The longest the event loop went without running a 5 ms ticker during ``fn``: what
    ingest on the same loop would wait at worst."""
    worst = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.005)
            last = now

    task = asyncio.ensure_future(ticker())
    await fn()
    done = True
    await task
    return worst


async def phases(storage: Storage, cfg: Config, end: int, query: TSQuery) -> dict[str, float]:
    """The engine's steps on the compacted data, each on its own, in process CPU seconds
    (one run, no worker threads): scan (the blocks the engine reads), decode (per block),
    assemble, downsample + aggregate (the kernels of the one group), render (JSON)."""
    layout = KeyLayout.from_storage_config(cfg.storage)
    uids = UidService(storage, cfg)
    metric_uid = await uids.metrics.get_id(METRIC)
    sub = query.queries[0]
    start_s, end_s = scan_window_s(query.start_ms, query.end_ms, sub.downsample_spec)
    plan = plan_metric_scan(
        layout,
        metric_uid,
        [],
        explicit_tags=False,
        start_s=start_s,
        end_s=end_s,
        expansion_limit=4096,
    )
    t0 = time.process_time()
    blocks: list[Block] = []
    for spec in plan.scans:
        table = cfg.storage.data_table
        async with contextlib.aclosing(storage.scan_blocks(table, spec)) as scanned:
            blocks += [block async for block in scanned]
    t1 = time.process_time()
    parts = [(block.keys, decode_block(block, layout)) for block in blocks]
    t2 = time.process_time()
    spans = assemble_spans(parts, layout)
    t3 = time.process_time()
    window = (start_s * 1000, end_s * 1000)
    groups = [list(range(spans.series_count))]
    aggregated = aggregate_groups(spans.batch, groups, sub, query, window)
    t4 = time.process_time()
    render_query_result(QueryResult(query, [_series_result(sub, aggregated[0])], []))
    t5 = time.process_time()
    return {
        "scan_s": t1 - t0,
        "decode_s": t2 - t1,
        "assemble_s": t3 - t2,
        "aggregate_s": t4 - t3,
        "render_s": t5 - t4,
        "points": float(sum(p.point_count for _, p in parts)),
        "rows": float(sum(len(b) for b in blocks)),
    }


def _series_result(sub: SubQuery, dps: AggregatedSeries) -> SeriesResult:
    return SeriesResult(
        sub=sub, metric=METRIC, tags={}, aggregate_tags=["host"], dps=dps, tsuids=[]
    )


async def main(n_series: int, step: int, repeat: int, vm: bool, size: bool) -> None:
    n_points = DAY // step
    values = make_values(n_series, n_points)
    end = BASE + DAY - 1
    with tempfile.TemporaryDirectory(prefix="tsd-bench-query-") as tmp:
        cfg = Config(core=CoreConfig(auto_create_metrics=True), storage=StorageConfig(data_dir=tmp))
        storage = EmbeddedStorage(Path(tmp))
        try:
            await ensure_tables(storage, cfg.storage)
            t0 = time.perf_counter()
            writer, rows = await load(storage, cfg, values, step)
            load_s = time.perf_counter() - t0
            sink = writer.head
            assert sink is not None
            engine = QueryEngine(storage, UidService(storage, cfg), cfg, head=sink.head)
            params = {"start": [str(BASE)], "end": [str(end)], "m": [f"sum:1m-avg:{METRIC}"]}
            query = parse_query_params(params)

            async def run_query() -> object:
                return await engine.compute(render_query_result, await engine.execute(query))

            # Same answer as the reference, then time both.
            result = await engine.execute(query)
            got = result.series[0].dps.values
            want = reference(values, step)
            assert np.allclose(got, want, rtol=1e-9), "engine and reference disagree"
            t_ref = statistics.median(
                [_time(lambda: reference(values, step)) for _ in range(max(3, repeat))]
            )
            c_ref = statistics.median(
                [_cpu(lambda: reference(values, step)) for _ in range(max(3, repeat))]
            )
            total = n_series * n_points
            print(f"data: {n_series} series x {n_points} points at {step}s = {total:,} points")
            print(f"load through the write path (ingest, writer, head): {load_s:.1f} s")
            print(
                f"numpy reference (same arrays in memory): {t_ref * 1000:.1f} ms "
                f"(cpu {c_ref * 1000:.1f} ms)"
            )
            await run_query()  # warm
            in_head = len(sink.head)
            fresh, fresh_cpu = await timed(repeat, run_query)
            in_head = min(in_head, len(sink.head))
            print(
                f"engine, fresh ({in_head:,} of {rows:,} rows still in the head): p50 "
                f"{fresh * 1000:.0f} ms (cpu {fresh_cpu * 1000:.0f} ms)  "
                f"ratio {fresh / t_ref:.1f}x (cpu {fresh_cpu / c_ref:.1f}x)"
            )
            t0 = time.perf_counter()
            await writer.close()  # every row written out, one compacted cell each
            print(f"head written out ({rows:,} rows): {time.perf_counter() - t0:.1f} s")
            result = await engine.execute(query)
            assert np.allclose(result.series[0].dps.values, want, rtol=1e-9)
            await run_query()  # warm
            wall, cpu = await timed(repeat, run_query)
            print(
                f"engine, compacted ({rows:,} rows, 1 cell each): p50 "
                f"{wall * 1000:.0f} ms (cpu {cpu * 1000:.0f} ms)  "
                f"ratio {wall / t_ref:.1f}x (cpu {cpu / c_ref:.1f}x)"
            )
            if vm:
                found = await victoria_metrics(values, step, repeat)
                if found is None:
                    print("victoria-metrics: not installed")
                else:
                    vm_wall, vm_points = found
                    print(
                        f"victoria-metrics, same data, sum(avg_over_time(bench_cpu[1m])) "
                        f"step 60s ({vm_points} points): p50 {vm_wall * 1000:.0f} ms  "
                        f"tsd/vm ratio fresh {fresh / vm_wall:.2f}x, "
                        f"compacted {wall / vm_wall:.2f}x"
                    )
            stall = await loop_stall(run_query)
            print(
                f"  event loop while it runs: longest gap between 5 ms ticks {stall * 1000:.0f} ms"
            )
            p = await phases(storage, cfg, end, query)
            print(
                f"  phases (cpu): scan {p['scan_s'] * 1000:.0f} ms, "
                f"decode {p['decode_s'] * 1000:.0f} ms "
                f"({p['points'] / p['decode_s'] / 1e6:.1f} M points/s), "
                f"assemble {p['assemble_s'] * 1000:.0f} ms, "
                f"downsample + aggregate {p['aggregate_s'] * 1000:.0f} ms, "
                f"render {p['render_s'] * 1000:.0f} ms"
            )
        finally:
            await storage.close()
    if size:
        with tempfile.TemporaryDirectory(prefix="tsd-bench-size-") as tmp:
            stored, points = await store_size(Path(tmp))
        print(
            f"embedded file after {points:,} points (1,000 series x 6 h at 10 s) through the "
            f"write path: {stored / 1e6:.1f} MB, {stored / points:.1f} B/point (goal <= 25)"
        )


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cpu(fn: Callable[[], object]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--step", type=int, default=10, help="seconds between points")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--size", action="store_true", help="also the embedded file's bytes per point"
    )
    parser.add_argument("--no-vm", action="store_true", help="skip the VictoriaMetrics baseline")
    args = parser.parse_args()
    asyncio.run(main(args.series, args.step, args.repeat, not args.no_vm, args.size))
