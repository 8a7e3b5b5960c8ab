"""``tsdb import`` of a 1,000,000-line file (points/s) against direct Storage.put of the same cells.

The file: ``--series`` series (10 metrics x hosts x 4 cpus, 3 tags each) and
``--points`` points each, 10 s apart, written time-major (every series at one time, then
the next), integers and decimals alternating: ``sys.cpu.m3 1356998410 42 host=web007
cpu=2 dc=lga``. ``tsdb import`` runs as a user runs it (its own process, a fresh embedded
store, ``--auto-metric``, compaction off unless ``--compaction``); its figure is the one it
prints on its ``Total:`` line (reading, parsing, UIDs, encoding, batching and every point
durable in storage; start-up excluded). Its points per CPU-second take the CPU time of its
process less that of an empty import (start-up).

Baselines, in the same run: ``Storage.put`` of the same points pre-encoded (row keys,
qualifiers and values computed beforehand, sorted batches of the writer's size) into a
fresh embedded store: what storage alone costs, the ceiling of any import; and the full
telnet put parser alone on every line (file blocks + parse_put, no writer), which the
import beats because lines of known series take the daemon's hot path instead. Each line
also shows points per CPU-second, which a machine shared with other work disturbs less
than the wall-clock rate.

Run: ``python -m bench.import_ [--series N] [--points N] [--gzip] [--compaction] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tsd.codec import KeyLayout, SeriesKey, encode_point, make_series_key
from tsd.config import StorageConfig
from tsd.data_points import Tags
from tsd.protocol.telnet import parse_put
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables
from tsd.tools.import_ import LineSource
from tsd.write.batch import DEFAULT_MAX_CELLS

BASE_TIME = 1_356_998_400
STEP_S = 10
METRICS = 10
CPUS = 4


def series_names(count: int) -> list[tuple[str, Tags]]:
    """(metric, sorted tags) of ``count`` series."""
    hosts = max(1, count // (METRICS * CPUS))
    names: list[tuple[str, Tags]] = []
    for m in range(METRICS):
        for h in range(hosts):
            for c in range(CPUS):
                tags: Tags = (("cpu", str(c)), ("dc", "lga"), ("host", f"web{h:03d}"))
                names.append((f"sys.cpu.m{m}", tags))
    return names[:count]


def value_text(i: int) -> str:
    return str(i % 1000) if i % 2 == 0 else f"{i % 1000}.5"


def write_file(path: Path, series: int, points: int, compress: bool) -> int:
    names = series_names(series)
    lines = 0
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as out:
        for p in range(points):
            ts = BASE_TIME + p * STEP_S
            chunk = []
            for s, (metric, tags) in enumerate(names):
                words = " ".join(f"{k}={v}" for k, v in tags)
                chunk.append(f"{metric} {ts} {value_text(p + s)} {words}\n")
            out.write("".join(chunk))
            lines += len(chunk)
    return lines


def encoded_batches(path: Path) -> list[list[Put]]:
    """Every point of the file as a cell (fake but fixed UIDs), in sorted writer-size batches."""
    layout = KeyLayout.from_storage_config(StorageConfig())
    uids: dict[str, bytes] = {}

    def uid(name: str) -> bytes:
        return uids.setdefault(name, len(uids).to_bytes(3, "big"))

    keys: dict[tuple[str, Tags], SeriesKey] = {}
    cells: list[Put] = []
    for lines in LineSource(str(path)).blocks():
        for line in lines:
            point = parse_put(("put " + line.decode()).split(" "))
            key = keys.get((point.metric, point.tags))
            if key is None:
                pairs = [(uid("k" + k), uid("v" + v)) for k, v in point.tags]
                key = keys[(point.metric, point.tags)] = make_series_key(
                    layout, uid("m" + point.metric), pairs
                )
            base, qualifier, value = encode_point(point.timestamp, point.value)
            cells.append(Put(key.row_key(base), "t", qualifier, value))
    batches = [cells[i : i + DEFAULT_MAX_CELLS] for i in range(0, len(cells), DEFAULT_MAX_CELLS)]
    return [sorted(b, key=lambda c: (c.row, c.qualifier)) for b in batches]


async def put_baseline(store: Path, batches: list[list[Put]]) -> tuple[float, float]:
    """Wall and CPU seconds (every thread of this process) of the puts."""
    storage = EmbeddedStorage(store)
    try:
        await ensure_tables(storage, StorageConfig())
        started, cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            await storage.put("tsdb", batch)
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await storage.close()


def parse_only(path: Path) -> tuple[int, float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    count = 0
    source = LineSource(str(path))
    for lines in source.blocks():
        for line in lines:
            parse_put(("put " + line.decode()).split(" "))
            count += 1
    source.close()
    return count, time.perf_counter() - started, time.process_time() - cpu


_TOTAL = re.compile(r"Total: imported (\d+) data points in ([\d.]+)s \(([\d.]+) points/s\)")
_COMPACTED = re.compile(r"Compacted (\d+) rows in ([\d.]+)s")


def run_import(path: Path, store: Path, config: Path) -> tuple[int, float, float, float, str]:
    """(points, seconds on its Total line, wall and CPU seconds of the process, its stdout)."""
    command = [sys.executable, "-m", "tsd", "import", str(path), "--data-dir", str(store)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "--auto-metric", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        cwd=store.parent,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"tsdb import failed ({done.returncode}):\n{done.stderr}")
    found = _TOTAL.search(done.stdout)
    assert found is not None, done.stdout
    return int(found[1]), float(found[2]), wall, cpu, done.stdout


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--points", type=int, default=1000, help="points per series")
    parser.add_argument("--gzip", action="store_true", help="import a gzipped file")
    parser.add_argument(
        "--compaction",
        action="store_true",
        help="leave compaction on (its CPU then counts in the import's points/cpu-s)",
    )
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and leave it there")
    args = parser.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="tsd-bench-import-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        data = root / ("points.txt.gz" if args.gzip else "points.txt")
        started = time.perf_counter()
        lines = write_file(data, args.series, args.points, args.gzip)
        print(
            f"{lines:,} lines, {data.stat().st_size / 1e6:.1f} MB ({data.name}), "
            f"written in {time.perf_counter() - started:.1f}s"
        )

        config = root / "opentsdb.conf"
        compaction = "true" if args.compaction else "false"
        config.write_text(f"tsd.storage.enable_compaction = {compaction}\n")
        empty = root / "empty.txt"
        empty.write_text("")
        *_, startup_cpu, _ = run_import(empty, root / "empty-store", config)
        points, import_s, wall, cpu, stdout = run_import(data, root / "import-store", config)
        assert points == lines, (points, lines)
        import_cpu = cpu - startup_cpu
        compacted = _COMPACTED.search(stdout)

        parsed, parse_s, parse_cpu = parse_only(data)
        batches = encoded_batches(data)
        put_s, put_cpu = asyncio.run(put_baseline(root / "baseline-store", batches))
        assert parsed == lines == sum(len(b) for b in batches)

        print(f"{'':36} {'points/s':>10} {'seconds':>8} {'points/cpu-s':>13}")
        rows = [
            ("tsdb import (its Total: line)", import_s, import_cpu),
            ("baseline: Storage.put, pre-encoded", put_s, put_cpu),
            ("full parser alone (parse_put a line)", parse_s, parse_cpu),
        ]
        for label, seconds, cpu_s in rows:
            print(f"{label:36} {lines / seconds:10,.0f} {seconds:8.2f} {lines / cpu_s:13,.0f}")
        print(f"tsdb import / Storage.put baseline: x{put_s / import_s:.2f} of the baseline's rate")
        extra = f", compaction of {compacted[1]} rows in {compacted[2]}s" if compacted else ""
        print(
            f"tsdb import process: wall {wall:.2f}s, CPU {cpu:.2f}s, of which start-up"
            f" {startup_cpu:.2f}s (an empty import){extra}"
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
