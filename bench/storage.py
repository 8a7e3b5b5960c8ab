"""EmbeddedStorage put and scan throughput (cells/s) against bare py-lmdb doing the same work.

Puts: 1,000,000 OpenTSDB-shaped cells (1,000 series, 13-byte row keys, 2-byte
qualifiers, 1-8 byte values) handed over in sorted batches of 10,000, as the
writer does, one durable commit per batch. The baseline writes the same cells
with py-lmdb directly (key = row + qualifier, one putmulti transaction per
batch, same sync settings), so the ratio is the cost of tsd's layer: key
encoding, Put objects, the writer thread and the event loop round trip.
Scan: every cell of the table through ``EmbeddedStorage.scan`` (Row and Cell
objects) against a bare cursor walk over the baseline's entries.

Run: ``python -m bench.storage [--series N] [--points N] [--batch N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import lmdb

from tsd.storage.base import FamilySpec, Put, ScanSpec
from tsd.storage.embedded import EmbeddedStorage

BASE_TIME = 1_356_998_400


def make_batches(n_series: int, points: int, batch: int) -> list[list[Put]]:
    """Sorted batches of cells: each batch the next seconds of every series, in key order.

    Row key: metric uid, base time, one tagk/tagv pair (13 bytes); qualifier: second offset
    with 8-byte-integer flags; at most 3,600 points, so every series has one row.
    """
    rows = [
        b"\x00\x00\x01" + BASE_TIME.to_bytes(4, "big") + b"\x00\x00\x01" + s.to_bytes(3, "big")
        for s in range(n_series)
    ]
    cells = [
        Put(row, "t", (p << 4 | 7).to_bytes(2, "big"), p.to_bytes(8, "big"))
        for p in range(min(points, 3600))
        for row in rows
    ]
    batches = [cells[i : i + batch] for i in range(0, len(cells), batch)]
    return [sorted(b, key=lambda c: (c.row, c.qualifier)) for b in batches]


async def embedded_run(path: Path, batches: list[list[Put]]) -> tuple[float, float, int]:
    storage = EmbeddedStorage(path)
    try:
        await storage.create_table("tsdb", [FamilySpec("t")])
        started = time.perf_counter()
        for batch in batches:
            await storage.put("tsdb", batch)
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        cells = 0
        async for row in storage.scan("tsdb", ScanSpec()):
            cells += len(row.cells)
        scan_s = time.perf_counter() - started
    finally:
        await storage.close()
    return put_s, scan_s, cells


def baseline_run(path: Path, batches: list[list[Put]]) -> tuple[float, float, int]:
    raw = [[(p.row + p.qualifier, p.value) for p in batch] for batch in batches]
    env = lmdb.open(str(path), map_size=1 << 40, sync=True, metasync=True, writemap=False)
    try:
        started = time.perf_counter()
        for items in raw:
            with env.begin(write=True) as txn:
                txn.cursor().putmulti(items)
        put_s = time.perf_counter() - started
        started = time.perf_counter()
        cells = 0
        with env.begin() as txn:
            for _key, _value in txn.cursor():
                cells += 1
        scan_s = time.perf_counter() - started
    finally:
        env.close()
    return put_s, scan_s, cells


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--points", type=int, default=1000, help="points per series")
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args(argv)
    batches = make_batches(args.series, args.points, args.batch)
    total = sum(len(b) for b in batches)
    root = Path(tempfile.mkdtemp(prefix="tsd-bench-storage-"))
    try:
        base_put, base_scan, base_cells = baseline_run(root / "bare", batches)
        put_s, scan_s, cells = asyncio.run(embedded_run(root / "embedded", batches))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert cells == base_cells == total, (cells, base_cells, total)
    print(f"{total:,} cells in {len(batches)} durable batches of {args.batch:,}")
    print(f"{'':10} {'put cells/s':>12} {'scan cells/s':>13}")
    print(f"{'bare lmdb':10} {total / base_put:12,.0f} {total / base_scan:13,.0f}")
    print(f"{'embedded':10} {total / put_s:12,.0f} {total / scan_s:13,.0f}")
    print(
        f"embedded / bare: put x{base_put / put_s:.2f} of the baseline's rate, "
        f"scan x{base_scan / scan_s:.2f}"
    )


if __name__ == "__main__":
    main()
