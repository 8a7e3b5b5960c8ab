"""The head's memory per row (tsd.head.Head): bytes really used against bytes counted.

``--rows`` rows (one series over one hour each) receive ``--points`` points each, one
point per row per batch (the shape of live data at one point per interval: every writer
batch carries one point of each of many rows), values integers 0..199 (1 or 2 value
bytes: 2 qualifier bytes + about 1.4 value bytes a point). Measured in a fresh process
per case:

* ``traced``: the bytes Python allocated (tracemalloc, numpy's buffers included) for the
  rows, per row (the last batch's runs are freed before the measure);
* ``rss``: the process's resident memory grown while adding the rows, per row (a second
  process, without tracemalloc; it includes the allocator's free lists and the page
  granularity);
* ``counted``: ``head.bytes`` per row, the figure ``tsd.storage.head.max_bytes`` bounds.

``--baseline REF`` measures the same cases with the head of git revision REF (its tree
exported with ``git archive``, run in its own process, C helpers not built there: the
head's memory does not depend on them), rounds alternating.

Run: ``python -m bench.head_memory [--rows N] [--points P,...] [--baseline REF]
[--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

BASE = 1356998400
ROOT = Path(__file__).resolve().parent.parent
BATCH_ROWS = 20_000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(rows: int, points: int, traced: bool) -> dict[str, float]:
    """Fill a head (the ``tsd`` importable from sys.path) and measure it: the bytes
    traced, or (``traced`` False: tracemalloc's own tables would count) the RSS grown."""
    from tsd.codec import KeyLayout, encode_point
    from tsd.config import StorageConfig
    from tsd.head import Head

    layout = KeyLayout.from_storage_config(StorageConfig())
    prefix = b"\x00\x00\x01" + BASE.to_bytes(4, "big") + b"\x00\x00\x01"
    cells = [encode_point(BASE + 10 * i, i % 200)[1:] for i in range(points)]
    rss0 = _rss()
    if traced:
        tracemalloc.start()
    head = Head(layout)
    batch = 0
    for i in range(points):
        q, v = cells[i]
        for start in range(0, rows, BATCH_ROWS):
            # each batch's keys are new objects, as decoded from a log record
            stop = min(rows, start + BATCH_ROWS)
            runs = [(prefix + s.to_bytes(3, "big"), 1, q, v) for s in range(start, stop)]
            head.add_runs(runs, batch, float(i))
            batch += 1
            del runs
    if traced:
        used = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        used = _rss() - rss0
    return {"used": used / rows, "counted": head.bytes / rows, "rows": len(head)}


def _export(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "tsd"], check=True, capture_output=True
    ).stdout
    tar = into / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into


def _child(path: Path, rows: int, points: int, traced: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(path), "TSD_DISABLE_NATIVE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(rows),
            str(points),
            str(int(traced)),
        ],
        check=True,
        capture_output=True,
        env=env,
        cwd=str(path),
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--points", default="2,360")
    parser.add_argument("--baseline", default="")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rows, points, traced = args.child
        print(json.dumps(measure(rows, points, bool(traced))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT}
        if args.baseline:
            trees = {"before": _export(args.baseline, Path(tmp)), **trees}
        for points in [int(p) for p in args.points.split(",")]:
            print(f"{args.rows:,} rows x {points} points, bytes per row:", flush=True)
            for r in range(args.rounds):
                order = list(trees.items())
                if r % 2:
                    order.reverse()
                for name, path in order:
                    traced = _child(path, args.rows, points, True)
                    rss = _child(path, args.rows, points, False)
                    print(
                        f"  {name:<7} traced {traced['used']:8.1f}  rss {rss['used']:8.1f}  "
                        f"counted {traced['counted']:8.1f}  (rows {int(traced['rows']):,})",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
