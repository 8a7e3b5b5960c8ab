"""Replay of the write-ahead log: 10 M points left in the log, stored by a restart.

The log is written as the daemon writes it (``WriteAheadLog.append`` of 50,000-cell
records, fsynced), then left unstored, as a kill -9 before storage took it would leave
it. Measured: ``Writer.recover()`` into the embedded engine's in-memory head, as the
daemon starts (read, CRC check, rows into the head: the daemon answers queries from
there), then, reported apart, the head's write-out to the store (one compacted cell per
row, as when the hours close); against the baseline of the same cells handed to
``Storage.put`` already built, in the same run, rounds alternating. Goal (issue 9): 10 M
points replayed into the head in 30 s at most.

Run: ``python -m bench.wal [--points N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from tsd.codec import KeyLayout, encode_point, make_series_key
from tsd.config import StorageConfig
from tsd.stats import StatsRegistry
from tsd.storage.base import FamilySpec, Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.wal import WriteAheadLog, encode_cells
from tsd.wal.record import Row
from tsd.write.head_flush import build_head_sink
from tsd.write.writer import Writer

BASE_TS = 1_700_000_000 - 1_700_000_000 % 3600
CELLS_PER_RECORD = 50_000
GOAL_S = 30.0


def make_records(points: int) -> list[list[Row]]:
    """``points`` cells in full row-hours of 3,600 one-second points (int values), as
    records of about 50,000 cells: rows of distinct series, the cells shared."""
    layout = KeyLayout()
    cells = [encode_point(BASE_TS + s, s % 100)[1:] for s in range(3600)]
    rows_needed = -(-points // 3600)
    rows: list[Row] = []
    for n in range(rows_needed):
        series = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", n.to_bytes(3, "big"))])
        count = min(3600, points - n * 3600)
        rows.append((series.row_key(BASE_TS), cells[:count]))
    per_record = max(1, CELLS_PER_RECORD // 3600)
    return [rows[i : i + per_record] for i in range(0, len(rows), per_record)]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="rounds, best kept")
    args = parser.parse_args()
    records = make_records(args.points)
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
