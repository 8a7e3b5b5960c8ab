"""Replay of the write-ahead log: 10 M points left in the log, stored by a restart.

The log is written as the daemon writes it (``WriteAheadLog.append`` of 50,000-cell
records, fsynced), then left unstored, as a kill -9 before storage took it would leave
it. Measured: ``Writer.recover()`` into the embedded engine's in-memory head, as the
daemon starts (read, CRC check, rows into the head: the daemon answers queries from
there), then, reported apart, the head's write-out to the store (one compacted cell per
row, as when the hours close); against the baseline of the same cells handed to
``Storage.put`` already built, in the same run, rounds alternating. Goal (issue 9): 10 M
points replayed into the head in 30 s at most.

HBase drain (``--hbase``; issue 9, milestone 4): records as an outage leaves them in the
log (one second of 20,000 points/s each: 2,000 series, 10 cells a row) drained into HBase
by the :class:`~tsd.write.spool.Spool` (read back from the segments, decoded, put one
record at a time, in order), against the baseline of the same cells handed to
``Storage.put`` already built, one record at a time, in the same run, rounds alternating.
``--hbase`` starts a standalone HBase (``scripts/hbase``, as bench/hbase_ingest.py does);
``--hbase HOST:PORT`` uses a running Thrift gateway.

Write-out against another commit (``--baseline REF``): each round replays the same log
and writes the head out once with this checkout and once with the tsd package of REF
(``git archive``), each in its own process, alternating; the write-out times and their
ratio are reported (best of the rounds). The log and the rows are the same in both.

Run: ``python -m bench.wal [--points N] [--repeat R] [--per-row N] [--floats] [--baseline REF]
[--hbase [HOST:PORT] [--hbase-points N]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.ingest import export
from tsd.codec import KeyLayout, encode_point, make_series_key
from tsd.config import StorageConfig
from tsd.stats import StatsRegistry
from tsd.storage.base import FamilySpec, Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings
from tsd.wal import WriteAheadLog, encode_cells
from tsd.wal.record import Row
from tsd.write.head_flush import build_head_sink
from tsd.write.writer import Writer

ROOT = Path(__file__).resolve().parent.parent
BASE_TS = 1_700_000_000 - 1_700_000_000 % 3600
CELLS_PER_RECORD = 50_000
GOAL_S = 30.0


def make_records(
    points: int, per_row: int = 3600, per_record: int = CELLS_PER_RECORD, floats: bool = False
) -> list[list[Row]]:
    """``points`` cells in rows of ``per_row`` one-second points (int values, or with
    ``floats`` two-decimal floats as most collectors send), as records of about
    ``per_record`` cells: rows of distinct series, the cells shared."""
    layout = KeyLayout()
    cells = [
        encode_point(BASE_TS + s, round(s % 1000 * 0.01, 2) if floats else s % 100)[1:]
        for s in range(per_row)
    ]
    rows_needed = -(-points // per_row)
    rows: list[Row] = []
    for n in range(rows_needed):
        series = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", n.to_bytes(3, "big"))])
        count = min(per_row, points - n * per_row)
        rows.append((series.row_key(BASE_TS), cells[:count]))
    rows_per_record = max(1, per_record // per_row)
    return [rows[i : i + rows_per_record] for i in range(0, len(rows), rows_per_record)]


async def write_log(directory: Path, records: list[list[Row]]) -> None:
    wal = WriteAheadLog(directory, StatsRegistry())
    await asyncio.to_thread(wal.segments)
    for rows in records:
        record = encode_cells((row, dict(cells)) for row, cells in rows)
        await wal.append(record, sum(len(cells) for _, cells in rows))
    await wal.close()  # nothing marked stored: the segments stay, as after a crash


async def open_store(path: Path) -> EmbeddedStorage:
    storage = EmbeddedStorage(path)
    await storage.create_table("tsdb", [FamilySpec("t")])
    return storage


async def replay(directory: Path, store_path: Path) -> tuple[float, float, int]:
    """(seconds to replay into the head, seconds to write the head out, cells)."""
    storage = await open_store(store_path)
    cfg = StorageConfig()  # the defaults: tsd.storage.head.max_bytes 256 MiB
    registry = StatsRegistry()
    wal = WriteAheadLog(directory, registry)
    sink = build_head_sink(storage, cfg, registry, wal=wal, wall_clock=time.time)
    writer = Writer(storage, cfg, registry, wal=wal, head=sink)
    started = time.perf_counter()
    cells = await writer.recover()
    elapsed = time.perf_counter() - started
    started = time.perf_counter()
    await writer.close()  # writes the head out
    written = time.perf_counter() - started
    await storage.close()
    return elapsed, written, cells


async def baseline(records: list[list[Row]], store_path: Path) -> float:
    """The same cells, Puts already built, straight into Storage.put."""
    storage = await open_store(store_path)
    batches = [[Put(row, "t", q, v) for row, cells in rows for q, v in cells] for rows in records]
    started = time.perf_counter()
    for puts in batches:
        await storage.put("tsdb", puts)
    elapsed = time.perf_counter() - started
    await storage.close()
    return elapsed


# -- the HBase drain --------------------------------------------------------------------------

#: an outage's records: one second of 20,000 points/s over 2,000 series
HBASE_PER_ROW = 10
HBASE_PER_RECORD = 20_000


async def hbase_tables(address: tuple[str, int], prefix: str) -> StorageConfig:
    host, port = address
    cfg = StorageConfig(
        backend="hbase",
        thrift_host=host,
        thrift_port=port,
        data_table=f"{prefix}tsdb",
        uid_table=f"{prefix}tsdb-uid",
        tree_table=f"{prefix}tsdb-tree",
        meta_table=f"{prefix}tsdb-meta",
        enable_compaction=False,
    )
    storage = HBaseStorage(hbase_settings(cfg))
    try:
        await storage.create_table(cfg.data_table, [FamilySpec("t")])
    finally:
        await storage.close()
    return cfg


async def hbase_drain(cfg: StorageConfig, records: list[list[Row]], directory: Path) -> float:
    """Seconds for the spool to store ``records`` (logged by this process, as an outage
    leaves them) into HBase."""
    storage = HBaseStorage(hbase_settings(cfg))
    wal = WriteAheadLog(directory, StatsRegistry())
    await asyncio.to_thread(wal.segments)
    writer = Writer(storage, cfg, StatsRegistry(), wal=wal, spool_max_bytes=1 << 50)
    spool = writer.spool
    assert spool is not None
    last: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for n, rows in enumerate(records):
        record = encode_cells((row, dict(cells)) for row, cells in rows)
        cells = sum(len(cells) for _, cells in rows)
        seq = await wal.append(record, cells)
        spool.add(seq, cells, len(record), last if n == len(records) - 1 else None, routed=False)
    started = time.perf_counter()
    writer.start()
    await last  # records drain in order: the last one's ack resolves last
    elapsed = time.perf_counter() - started
    await writer.close()
    await storage.close()
    return elapsed


async def hbase_baseline(cfg: StorageConfig, records: list[list[Row]]) -> float:
    """The same cells, Puts already built, into HBase one record at a time."""
    storage = HBaseStorage(hbase_settings(cfg))
    batches = [[Put(row, "t", q, v) for row, cells in rows for q, v in cells] for rows in records]
    started = time.perf_counter()
    for puts in batches:
        await storage.put(cfg.data_table, puts)
    elapsed = time.perf_counter() - started
    await storage.close()
    return elapsed


def run_hbase(address: str, points: int, repeat: int) -> None:
    from bench.hbase_ingest import start_hbase  # noqa: PLC0415 (java only when asked)

    records = make_records(points, HBASE_PER_ROW, HBASE_PER_RECORD)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hbase = None
        if address:
            host, _, port = address.rpartition(":")
            where = (host or "127.0.0.1", int(port))
        else:
            hbase = start_hbase(root / "hbase")
            where = (hbase.server.thrift_host, hbase.server.thrift_port)
        try:
            drains, puts = [], []
            for n in range(repeat):
                cfg = asyncio.run(hbase_tables(where, f"wal{os.getpid()}d{n}_"))
                drains.append(asyncio.run(hbase_drain(cfg, records, root / f"wal{n}")))
                cfg = asyncio.run(hbase_tables(where, f"wal{os.getpid()}b{n}_"))
                puts.append(asyncio.run(hbase_baseline(cfg, records)))
        finally:
            if hbase is not None:
                hbase.stop()
    drain, put = min(drains), min(puts)
    print(f"HBase drain: {points:,} points in {len(records)} records; best of {repeat}")
    print(f"  spool drain into HBase: {drain:6.2f} s ({points / drain:,.0f} points/s)")
    print(f"  Storage.put of the same cells, built: {put:6.2f} s ({points / put:,.0f} points/s)")
    print(f"  drain / Storage.put: {drain / put:.2f}")
    print(f"  a 60 s outage at 20,000 points/s drains in {1_200_000 / (points / drain):.0f} s")


# -- the write-out against another commit ----------------------------------------------------


def one_round(points: int, per_row: int, floats: bool) -> None:
    """One replay and write-out in this process (the tsd it imports); JSON on stdout."""
    records = make_records(points, per_row, floats=floats)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(write_log(root / "wal", records))
        elapsed, written, cells = asyncio.run(replay(root / "wal", root / "replayed"))
    rows = -(-points // per_row)
    print(json.dumps({"replay_s": elapsed, "write_out_s": written, "cells": cells, "rows": rows}))


def round_in(source: Path, points: int, per_row: int, floats: bool) -> dict[str, float]:
    """:func:`one_round` in a process importing tsd from ``source`` (bench from here)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(source), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-m", "bench.wal", "--one-round", "--points", str(points),
         "--per-row", str(per_row), *(["--floats"] if floats else [])],
        cwd=source, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    found: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return found


def run_baseline(ref: str, points: int, per_row: int, repeat: int, floats: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        before = export(ref, Path(tmp))
        best = {"after": float("inf"), "before": float("inf")}
        rows = 0
        for _ in range(repeat):
            for name, source in (("after", ROOT), ("before", before)):
                found = round_in(source, points, per_row, floats)
                best[name] = min(best[name], found["write_out_s"])
                rows = int(found["rows"])
    kind = "two-decimal floats" if floats else "integers"
    print(
        f"head write-out: {points:,} points ({kind}), {rows:,} rows of {per_row}; best of {repeat}"
    )
    print(f"  before = tsd at {ref}, after = this checkout; rounds alternating")
    for name in ("before", "after"):
        print(f"  {name:>6}: {best[name]:6.2f} s ({best[name] / rows * 1000:.3f} ms a row)")
    print(f"  before / after: {best['before'] / best['after']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--per-row", type=int, default=3600, help="points a row (an hour)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, best kept")
    parser.add_argument("--floats", action="store_true", help="two-decimal float values")
    parser.add_argument("--baseline", metavar="REF", help="the write-out against this git ref")
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hbase", nargs="?", const="", default=None, metavar="HOST:PORT")
    parser.add_argument("--hbase-points", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.hbase is not None:
        run_hbase(args.hbase, args.hbase_points, args.repeat)
        return
    if args.one_round:
        one_round(args.points, args.per_row, args.floats)
        return
    if args.baseline:
        run_baseline(args.baseline, args.points, args.per_row, args.repeat, args.floats)
        return
    records = make_records(args.points, args.per_row, floats=args.floats)
    best_replay = best_put = best_out = float("inf")
    log_bytes = 0
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            asyncio.run(write_log(root / "wal", records))
            log_bytes = sum(p.stat().st_size for p in (root / "wal").glob("*.wal"))
            elapsed, written, cells = asyncio.run(replay(root / "wal", root / "replayed"))
            assert cells == args.points, (cells, args.points)
            best_replay = min(best_replay, elapsed)
            best_out = min(best_out, written)
            best_put = min(best_put, asyncio.run(baseline(records, root / "baseline")))
    shape = f"{args.points:,} points, log {log_bytes / 1e6:,.1f} MB"
    print(f"wal replay: {shape}; best of {args.repeat}")
    rate = args.points / best_replay
    print(f"  replay into the head: {best_replay:6.2f} s ({rate:,.0f} points/s)")
    print(f"  then the head written out, compacted: {best_out:6.2f} s")
    print(f"  Storage.put of the same cells, built: {best_put:6.2f} s")
    print(f"  replay / Storage.put: {best_replay / best_put:.2f}")
    verdict = "met" if best_replay <= GOAL_S else "not met"
    goal = f"{args.points:,} points in {GOAL_S:.0f} s at most"
    print(f"  goal: {goal} -> {best_replay:.1f} s: {verdict}")


if __name__ == "__main__":
    main()
