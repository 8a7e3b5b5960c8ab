"""Bytes per point on disk: the embedded store beside VictoriaMetrics, same points, same run.

Three data sets, fixed seed, each ``--series`` series (default 1,000) x 24 h x 10 s:

* ``walk``: a %.2f random walk (steps normal(0, 1), two decimals: 4- or 8-byte floats);
* ``counter``: integer counters, increments uniform in 0..1000;
* ``gauge``: integers drawn from {0, 1, 2, 3}.

Each is loaded the way the daemon loads it: through the :class:`~tsd.write.writer.Writer`
with its write-ahead log and in-memory head (default bound and grace), in time order, on a
simulated wall clock (points arrive 5 s after their time, the head's tick runs each
simulated minute and writes each row out once its hour is closed). The whole data directory
is measured while the last hour is still in the head (store and log, as a running daemon
has it), then after the hours closed and the writer closed: its files' sizes, and the
pages the store's B-trees use (``live``). ``after compact-store`` is the directory after
``tsdb compact-store`` (a compacting copy of the store). ``--whole-rows`` also loads each
set as whole compacted rows, straight into the store (no log, no head).

VictoriaMetrics (Debian's ``victoria-metrics``, when installed) is loaded with the same
points through ``/api/v1/import``, then ``/internal/force_flush`` and
``/internal/force_merge``, and its data directory measured once its size is stable.

Rollups count (issue 12): the embedded store computes tsd's own rollups by default, so the
load through the write path computes them as the daemon does (the head's write-out, the
default configuration) and whole rows get them from ``tsdb rollup-backfill``'s code; the
sizes include them, and the rollup tables' pages are also given on their own, per point of
raw data.

``--query-baseline REV`` also runs ``bench/query.py --baseline REV`` (60 s data, no
VictoriaMetrics): the compacted query at git revision REV beside HEAD, rounds alternating.

Run: ``python -m bench.footprint [--series N] [--hours H] [--sets walk,counter,gauge]
[--whole-rows] [--no-vm] [--query-baseline REV] [--query-series N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import orjson

from tsd.codec import KeyLayout, SeriesKey, compact_row, encode_point, make_series_key
from tsd.config import Config, CoreConfig, StorageConfig
from tsd.query.rollup_compute import ComputedRollups
from tsd.stats import StatsRegistry
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.embedded.maintenance import compact_store, store_pages, table_bytes
from tsd.storage_setup import ensure_tables, rollup_setup
from tsd.tools.common import ToolStore
from tsd.tools.rollup_backfill import backfill
from tsd.uid.service import UidService
from tsd.wal import WriteAheadLog
from tsd.write.head_flush import build_head_sink
from tsd.write.pipeline import WAL_DIRECTORY
from tsd.write.writer import Writer

BASE = 1356998400  # 2013-01-01 00:00:00 UTC
STEP = 10
SEED = 20261124
Values = npt.NDArray[np.float64] | npt.NDArray[np.int64]


def make_set(name: str, n_series: int, n_points: int) -> Values:
    rng = np.random.default_rng([SEED, ["walk", "counter", "gauge"].index(name)])
    if name == "walk":
        steps = np.round(rng.normal(0, 1, size=(n_series, n_points)), 2)
        start = np.round(rng.uniform(0, 1000, size=(n_series, 1)), 2)
        return np.asarray(np.round(start + np.cumsum(steps, axis=1), 2), np.float64)
    if name == "counter":
        increments = rng.integers(0, 1001, size=(n_series, n_points))
        return np.asarray(np.cumsum(increments, axis=1), np.int64)
    return np.asarray(rng.integers(0, 4, size=(n_series, n_points)), np.int64)


def dir_bytes(path: Path) -> tuple[int, int]:
    """(sum of file sizes, bytes allocated on disk) of every file under ``path``."""
    size = blocks = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            size += st.st_size
            blocks += st.st_blocks * 512
    return size, blocks


async def series_keys(storage: EmbeddedStorage, cfg: Config, n: int) -> list[SeriesKey]:
    uids = UidService(storage, cfg)
    layout = KeyLayout.from_storage_config(cfg.storage)
    metric = await uids.metrics.assign("bench.footprint")
    host = await uids.tagk.assign("host")
    return [
        make_series_key(layout, metric, [(host, await uids.tagv.assign(f"h{s:05d}"))])
        for s in range(n)
    ]


async def open_for_load(path: Path, n: int) -> tuple[Config, EmbeddedStorage, list[SeriesKey]]:
    """A new store in ``path`` with the tables and ``n`` series of the bench's metric."""
    cfg = Config(
        core=CoreConfig(auto_create_metrics=True), storage=StorageConfig(data_dir=str(path))
    )
    storage = EmbeddedStorage(path)
    await ensure_tables(storage, cfg.storage, rollup_setup(cfg).tables())
    return cfg, storage, await series_keys(storage, cfg, n)


def own_rollups(cfg: Config) -> ComputedRollups:
    """The rollups the daemon computes by default on the embedded store (docs/rollups.md)."""
    setup = rollup_setup(cfg)
    assert setup.effective is not None
    layout = KeyLayout.from_storage_config(cfg.storage)
    return ComputedRollups.from_config(setup.effective, setup.effective.intervals, layout)


async def load_through_writer(path: Path, values: Values) -> float:
    """Load as the daemon does (write-ahead log, in-memory head with its default bound and
    grace, rows written out as their hours close); the seconds it took."""
    cfg, storage, keys = await open_for_load(path, values.shape[0])
    now = float(BASE)
    registry = StatsRegistry()
    wal = WriteAheadLog(path / WAL_DIRECTORY, registry, segment_bytes=cfg.storage.wal_segment_bytes)
    sink = build_head_sink(
        storage, cfg.storage, registry, wal=wal, wall_clock=lambda: now, rollups=own_rollups(cfg)
    )
    writer = Writer(storage, cfg.storage, registry, wal=wal, head=sink)
    await writer.recover()
    writer.start()
    t0 = time.perf_counter()
    for t in range(values.shape[1]):
        ts = BASE + t * STEP
        now = ts + 5.0
        column = values[:, t].tolist()
        if writer.is_full():
            await writer.wait_writable()
        writer.add_points([(key, ts, v) for key, v in zip(keys, column, strict=True)])
        if t % 6 == 5:  # the head's own tick, on the simulated clock
            await writer.flush()
            await sink.flush_due()
        if t % 60 == 0:
            await asyncio.sleep(0)
    await writer.flush()
    # While running: the last hour still in the head, its points in the log (store + log).
    size, _ = dir_bytes(path)
    wal_size, _ = dir_bytes(path / WAL_DIRECTORY)
    print(
        f"  {'loaded, last hour in the head':<34} dir {size / values.size:5.2f} B/pt "
        f"(log {wal_size} B)"
    )
    now = BASE + values.shape[1] * STEP + 3600.0 + 1200.0  # an hour later: every hour closed
    await sink.flush_due()
    await writer.close()
    elapsed = time.perf_counter() - t0
    await storage.close()
    return elapsed


async def load_whole_rows(path: Path, values: Values) -> float:
    """Each row once, compacted (what the store receives when open hours stay in memory)."""
    cfg, storage, keys = await open_for_load(path, values.shape[0])
    per_hour = 3600 // STEP
    t0 = time.perf_counter()
    for hour in range(values.shape[1] // per_hour):
        base = BASE + hour * 3600
        puts = []
        block = values[:, hour * per_hour : (hour + 1) * per_hour].tolist()
        for key, row_values in zip(keys, block, strict=True):
            cell = compact_row(
                [encode_point(base + i * STEP, v)[1:] for i, v in enumerate(row_values)]
            )
            assert cell is not None
            puts.append(Put(key.row_key(base), "t", *cell))
        await storage.put(cfg.storage.data_table, puts)
    elapsed = time.perf_counter() - t0
    await storage.close()
    return elapsed


def measure(path: Path, points: int, label: str) -> dict[str, float]:
    size, disk = dir_bytes(path)
    used, total = store_pages(path)
    wal_size, _ = dir_bytes(path / WAL_DIRECTORY) if (path / WAL_DIRECTORY).exists() else (0, 0)
    rollups = sum(b for table, b in table_bytes(path).items() if "-rollup-" in table)
    print(
        f"  {label:<34} dir {size / points:5.2f} B/pt (on disk {disk / points:5.2f}; "
        f"log {wal_size} B)  store pages in use {used / points:5.2f} B/pt of "
        f"{total / points:5.2f}, of which rollups {rollups / points:5.2f}"
    )
    return {"dir": size / points, "disk": disk / points, "live": used / points}


async def roll_up(path: Path) -> float:
    """tsd's own rollups of a store loaded without the head (whole rows), as
    ``tsdb rollup-backfill`` computes them; the seconds it took."""
    cfg = Config(storage=StorageConfig(data_dir=str(path)))
    storage = EmbeddedStorage(path)
    try:
        t0 = time.perf_counter()
        store = ToolStore(cfg, storage, UidService(storage, cfg))
        await backfill(store, own_rollups(cfg), BASE - 3600, 2**31)
        return time.perf_counter() - t0
    finally:
        await storage.close()


async def vm_bytes(values: Values) -> int | None:
    """VictoriaMetrics' data directory bytes for the same points, None without the binary."""
    async with victoria_with(values, STEP, "bench_footprint") as found:
        if found is None:
            return None
        session, base, data = found
        async with session.get(f"{base}/internal/force_merge"):
            pass
        last = -1
        for _ in range(120):  # until merges settle
            await asyncio.sleep(1.0)
            size = dir_bytes(data)[0]
            if size == last:
                break
            last = size
        return dir_bytes(data)[0]


def query_baseline(rev: str, series: int, rounds: int) -> None:
    """bench/query.py's compacted query at ``rev`` beside HEAD, rounds alternating (its
    ``--baseline``: both daemons on copies of one data directory)."""
    subprocess.run(
        [sys.executable, "-m", "bench.query", "--steps", "60", "--no-vm", "--baseline", rev]
        + ["--series", str(series), "--rounds", str(max(5, rounds))],
        check=True,
    )


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


async def _wait_for(session: aiohttp.ClientSession, url: str) -> None:
    for _ in range(200):
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as reply:
                if reply.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise RuntimeError("victoria-metrics did not start")


async def main(args: argparse.Namespace) -> None:
    n_points = args.hours * 3600 // STEP
    loaders: list[tuple[str, Callable[[Path, Values], object]]] = [
        ("through the writer", load_through_writer)
    ]
    if args.whole_rows:
        loaders.append(("whole compacted rows", load_whole_rows))
    for name in filter(None, args.sets.split(",")):
        values = make_set(name, args.series, n_points)
        points = values.size
        print(f"{name}: {args.series} series x {n_points} points = {points:,} points")
        for label, loader in loaders:
            with tempfile.TemporaryDirectory(prefix="tsd-bench-footprint-") as tmp:
                path = Path(tmp) / "data"
                elapsed = await loader(path, values)  # type: ignore[misc]
                print(f"  loaded {label} in {elapsed:.0f} s (rollups computed as written)")
                if loader is load_whole_rows:
                    print(f"  rolled up in {await roll_up(path):.1f} s (rollup-backfill)")
                measure(path, points, label)
                t0 = time.perf_counter()
                compact_store(path)
                measure(path, points, f"after compact-store ({time.perf_counter() - t0:.1f} s)")
        if not args.no_vm:
            vm = await vm_bytes(values)
            if vm is None:
                print("  victoria-metrics: not installed")
            else:
                print(f"  victoria-metrics                   dir {vm / points:5.2f} B/pt")
    if args.query_baseline:
        query_baseline(args.query_baseline, args.query_series, args.rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--sets", default="walk,counter,gauge")
    parser.add_argument("--whole-rows", action="store_true")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument("--query-baseline", default="")
    parser.add_argument("--query-series", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
