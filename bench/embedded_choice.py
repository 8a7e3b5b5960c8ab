"""Which embedded key-value store for tsd: durable batched inserts and a range scan, per engine.

Measures, on this machine, 1,000,000 inserts of 16-byte keys (8-byte values) committed durably
(fsync per commit) in batches of 10,000 keys, once with each batch in random order and once with
each batch sorted, then a 100,000-key range scan from the middle of the key space. Engines: LMDB
(py-lmdb), SQLite (stdlib, WAL + synchronous=FULL, WITHOUT ROWID table) and RocksDB (rocksdict,
sync writes) when it is installed. A third load, "series", has the shape tsd's writer produces
(1,000 series, each batch the next timestamps of every series). The baseline for the ratios
is LMDB, the engine tsd uses.

Run: ``python -m bench.embedded_choice [--keys N] [--batch N] [--scan N] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import importlib
import random
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

Batch = list[tuple[bytes, bytes]]
VALUE = b"\x00\x00\x00\x00\x00\x00\x00\x2a"


@dataclass
class Result:
    engine: str
    order: str
    load_s: float
    scan_s: float


class Engine:
    name = ""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write_batch(self, batch: Batch) -> None:
        raise NotImplementedError

    def scan(self, start: bytes, count: int) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class LmdbEngine(Engine):
    name = "lmdb"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        # sync=True, metasync=True, writemap=False: a committed txn is on disk.
        self.env = lmdb.open(str(path), map_size=1 << 40, sync=True, metasync=True)

    def write_batch(self, batch: Batch) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(batch)

    def scan(self, start: bytes, count: int) -> int:
        seen = 0
        with self.env.begin() as txn:
            cursor = txn.cursor()
            cursor.set_range(start)
            for _key, _value in cursor:
                seen += 1
                if seen == count:
                    break
        return seen

    def close(self) -> None:
        self.env.close()


class SqliteEngine(Engine):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "kv.sqlite", isolation_level=None)
        # WAL with synchronous=FULL: each commit fsyncs the WAL, so it survives power loss.
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def write_batch(self, batch: Batch) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", batch)
        self.db.execute("COMMIT")

    def scan(self, start: bytes, count: int) -> int:
        rows = self.db.execute(
            "SELECT k, v FROM kv WHERE k >= ? ORDER BY k LIMIT ?", (start, count)
        ).fetchall()
        return len(rows)

    def close(self) -> None:
        self.db.close()


class RocksEngine(Engine):
    name = "rocksdb"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        # Imported by name: rocksdict is optional and not a project dependency.
        self.rd: Any = importlib.import_module("rocksdict")
        self.db = self.rd.Rdict(str(path), options=self.rd.Options(raw_mode=True))
        self.sync = self.rd.WriteOptions()
        self.sync.sync = True

    def write_batch(self, batch: Batch) -> None:
        wb = self.rd.WriteBatch(raw_mode=True)
        for key, value in batch:
            wb.put(key, value)
        self.db.write(wb, write_opt=self.sync)

    def scan(self, start: bytes, count: int) -> int:
        seen = 0
        for _item in self.db.items(from_key=start):
            seen += 1
            if seen == count:
                break
        return seen

    def close(self) -> None:
        self.db.close()


def make_batches(n_keys: int, batch_size: int, order: str, seed: int = 7) -> list[Batch]:
    """Batches of 16-byte keys: uniformly random ("random", "sorted" within each batch) or
    shaped like tsd's writer output ("series": 1,000 series of 8-byte id + 8-byte timestamp,
    each batch carrying the next timestamps of every series, sorted)."""
    rng = random.Random(seed)
    if order == "series":
        n_series = 1000
        series = [rng.randbytes(8) for _ in range(n_series)]
        keys = [s + t.to_bytes(8, "big") for t in range(n_keys // n_series) for s in series]
    else:
        keys = [rng.randbytes(16) for _ in range(n_keys)]
    batches = [keys[i : i + batch_size] for i in range(0, n_keys, batch_size)]
    return [[(k, VALUE) for k in (b if order == "random" else sorted(b))] for b in batches]


def run_one(
    factory: Callable[[Path], Engine], root: Path, order: str, batches: Sequence[Batch], scan: int
) -> Result:
    path = root / f"{factory.__name__}-{order}"
    engine = factory(path)
    try:
        started = time.perf_counter()
        for batch in batches:
            engine.write_batch(batch)
        load_s = time.perf_counter() - started
        start = b"\x80" + b"\x00" * 15  # middle of the uniformly random key space
        scans = []
        seen = 0
        for _ in range(3):
            started = time.perf_counter()
            seen = engine.scan(start, scan)
            scans.append(time.perf_counter() - started)
        assert seen == scan, f"{engine.name} scanned {seen} keys, wanted {scan}"
        return Result(engine.name, order, load_s, min(scans))
    finally:
        engine.close()
        shutil.rmtree(path, ignore_errors=True)


def engines() -> list[Callable[[Path], Engine]]:
    found: list[Callable[[Path], Engine]] = [LmdbEngine, SqliteEngine]
    try:
        importlib.import_module("rocksdict")
    except ImportError:
        print("rocksdict not installed: skipping RocksDB")
    else:
        found.append(RocksEngine)
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--scan", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="where to put the stores (default: a tempdir)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tsd-bench-", dir=args.dir))
    print(f"{args.keys:,} durable inserts, batches of {args.batch:,}; scan {args.scan:,} keys")
    results: list[Result] = []
    try:
        for order in ("sorted", "random", "series"):
            batches = make_batches(args.keys, args.batch, order)
            for factory in engines():
                result = run_one(factory, root, order, batches, args.scan)
                results.append(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    baseline = {r.order: r for r in results if r.engine == "lmdb"}
    print(f"{'engine':8} {'order':7} {'load s':>8} {'keys/s':>11} {'scan ms':>8}  vs lmdb")
    for r in results:
        base = baseline[r.order]
        print(
            f"{r.engine:8} {r.order:7} {r.load_s:8.2f} {args.keys / r.load_s:11,.0f} "
            f"{r.scan_s * 1000:8.1f}  load x{r.load_s / base.load_s:.2f}, "
            f"scan x{r.scan_s / base.scan_s:.2f}"
        )


if __name__ == "__main__":
    main()
