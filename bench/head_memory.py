"""The head's memory per row (tsd.head.Head): bytes really used against bytes counted.

``--rows`` rows (one series over one hour each) receive ``--points`` points each, one
point per row per batch (the shape of live data at one point per interval: every writer
batch carries one point of each of many rows). ``--values``: ``counter`` (the default:
integers 0..199 counting up, the same in every row: 1 or 2 value bytes, 2 qualifier bytes
+ about 1.4 value bytes a point), ``constant`` (one integer per row for ever, as
bench/cardinality.py sends), ``walk`` (each row its own random walk of integers, steps of
-3..3: a gauge) or ``float`` (each row its own random walk of doubles: 8 value bytes).
Rows' points are packed as they come (tsd/head/pack.py), so the shape of the values
decides their bytes. Measured in a fresh process per case:

* ``traced``: the bytes Python allocated (tracemalloc, numpy's buffers included) for the
  rows, per row (the last batch's runs are freed before the measure);
* ``rss``: the process's resident memory grown while adding the rows, per row (a second
  process, without tracemalloc; it includes the allocator's free lists and the page
  granularity);
* ``counted``: ``head.bytes`` per row, the figure ``tsd.storage.head.max_bytes`` bounds.

``--baseline REF`` measures the same cases with the head of git revision REF (its tree
exported with ``git archive`` and its C helpers built, run in its own process), rounds
alternating.

``--speed ROWS`` measures CPU time instead (us a row, medians over ``--rounds``, the two
trees alternating, each in its own process): new rows, a point for a row held (batches of
5,000 rows), a snapshot of an hour of ROWS rows of 30 points (what a query copies), and
the write-out's take and release of every row.

Run: ``python -m bench.head_memory [--rows N] [--points P,...] [--values V,...]
[--baseline REF] [--rounds R] [--speed ROWS]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from bench.ingest import export

BASE = 1356998400
ROOT = Path(__file__).resolve().parent.parent
BATCH_ROWS = 20_000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


VALUES = ("counter", "constant", "walk", "float")


def _values(kind: str, rows: int, points: int) -> Callable[[int, int, int], tuple[bytes, bytes]]:
    """Per point i, the rows start..stop's cells (qualifier, value): one qualifier and
    value for every row (``counter``), or a value per row (the others, made up front)."""
    import numpy as np

    from tsd.codec import encode_point

    if kind == "counter":
        cells = [encode_point(BASE + 10 * i, i % 200)[1:] for i in range(points)]
        return lambda i, start, stop: cells[i]
    rng = np.random.default_rng(26)
    if kind == "constant":
        ints = np.repeat((np.arange(rows) % 97)[None, :], points, axis=0)
    elif kind == "walk":
        steps = rng.integers(-3, 4, size=(points, rows))
        ints = np.clip(100 + np.cumsum(steps, axis=0), 0, 255)
    else:
        doubles = 50.0 + np.cumsum(rng.normal(0, 0.5, size=(points, rows)), axis=0)
        v8 = doubles.astype(">f8").tobytes()
        q8 = [encode_point(BASE + 10 * i, 0.1)[1] for i in range(points)]  # 8-byte doubles
        return lambda i, start, stop: (q8[i], v8[8 * (i * rows + start) : 8 * (i * rows + stop)])
    v1 = ints.astype(np.uint8).tobytes()
    q1 = [encode_point(BASE + 10 * i, 1)[1] for i in range(points)]
    return lambda i, start, stop: (q1[i], v1[i * rows + start : i * rows + stop])


def measure(rows: int, points: int, traced: bool, kind: str = "counter") -> dict[str, float]:
    """Fill a head (the ``tsd`` importable from sys.path) and measure it: the bytes
    traced, or (``traced`` False: tracemalloc's own tables would count) the RSS grown."""
    from tsd.codec import KeyLayout
    from tsd.config import StorageConfig
    from tsd.head import Head

    layout = KeyLayout.from_storage_config(StorageConfig())
    prefix = b"\x00\x00\x01" + BASE.to_bytes(4, "big") + b"\x00\x00\x01"
    cells = _values(kind, rows, points)
    rss0 = _rss()
    if traced:
        tracemalloc.start()
    head = Head(layout)
    batch = 0
    for i in range(points):
        for start in range(0, rows, BATCH_ROWS):
            # each batch's keys are new objects, as decoded from a log record
            stop = min(rows, start + BATCH_ROWS)
            q, v = cells(i, start, stop)
            if kind == "counter":
                runs = [(prefix + s.to_bytes(3, "big"), 1, q, v) for s in range(start, stop)]
            else:  # a value per row: v holds them end to end, of one width
                width = len(v) // (stop - start)
                runs = [
                    (
                        prefix + s.to_bytes(3, "big"),
                        1,
                        q,
                        v[(s - start) * width : (s - start + 1) * width],
                    )
                    for s in range(start, stop)
                ]
            head.add_runs(runs, batch, float(i))
            batch += 1
            del runs
    if traced:
        used = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        used = _rss() - rss0
    return {"used": used / rows, "counted": head.bytes / rows, "rows": len(head)}


def speed(rows: int) -> dict[str, float]:
    """CPU time (us a row) of the head's steps: new rows, a point for a row held (batches
    of 5,000, one point a row), a snapshot of an hour of ``rows`` rows of 30 points, and
    the write-out's take and release of every row."""
    import time

    from tsd.codec import KeyLayout, encode_point
    from tsd.config import StorageConfig
    from tsd.head import Head
    from tsd.storage.base import ScanSpec

    layout = KeyLayout.from_storage_config(StorageConfig())
    prefix = b"\x00\x00\x01" + BASE.to_bytes(4, "big") + b"\x00\x00\x01"
    keys = [prefix + s.to_bytes(3, "big") for s in range(rows)]
    head = Head(layout)
    spent = [0.0] * 30
    for i in range(30):
        q, v = encode_point(BASE + 10 * i, i)[1:]
        batches = [[(k, 1, q, v) for k in keys[s : s + 5000]] for s in range(0, rows, 5000)]
        started = time.process_time()
        for runs in batches:
            head.add_runs(runs, i, float(i))
        spent[i] = time.process_time() - started
    hour = ScanSpec(start=prefix[:7], stop=prefix[:3] + (BASE + 3600).to_bytes(4, "big"))
    started = time.process_time()
    head.snapshot([hour]).remaining()
    snapshot = time.process_time() - started
    started = time.process_time()
    for key in head.all_keys():
        taken = head.take(key)
        assert taken is not None
        head.release(taken)
    out = time.process_time() - started
    per_row = 1e6 / rows
    return {
        "new": spent[0] * per_row,
        "held": sum(spent[1:]) / 29 * per_row,
        "snapshot": snapshot * per_row,
        "take_release": out * per_row,
    }


def _child(
    path: Path, rows: int, points: int, traced: int, kind: str = "counter"
) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(path)}
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(rows),
            str(points),
            str(int(traced)),
            "--values",
            kind,
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
    parser.add_argument("--values", default="counter", help="one or more of " + ",".join(VALUES))
    parser.add_argument("--baseline", default="")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--speed", type=int, default=0, metavar="ROWS", help="CPU time a row of each step"
    )
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rows, points, traced = args.child
        if traced < 0:
            print(json.dumps(speed(rows)))
        else:
            print(json.dumps(measure(rows, points, bool(traced), args.values)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT}
        if args.baseline:
            trees = {"before": export(args.baseline, Path(tmp)), **trees}
        if args.speed:
            _speeds(trees, args)
            return
        for kind in args.values.split(","):
            for points in [int(p) for p in args.points.split(",")]:
                print(f"{args.rows:,} rows x {points} points ({kind}), bytes per row:", flush=True)
                for r in range(args.rounds):
                    order = list(trees.items())
                    if r % 2:
                        order.reverse()
                    for name, path in order:
                        traced = _child(path, args.rows, points, True, kind)
                        rss = _child(path, args.rows, points, False, kind)
                        print(
                            f"  {name:<7} traced {traced['used']:8.1f}  rss {rss['used']:8.1f}  "
                            f"counted {traced['counted']:8.1f}  (rows {int(traced['rows']):,})",
                            flush=True,
                        )


def _speeds(trees: dict[str, Path], args: argparse.Namespace) -> None:
    print(f"{args.speed:,} rows, CPU us a row, median of {args.rounds} rounds alternating:")
    found: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        order = list(trees.items())
        if r % 2:
            order.reverse()
        for name, path in order:
            found[name].append(_child(path, args.speed, 0, -1))
    for name, runs in found.items():
        medians = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(f"  {name:<7} " + "  ".join(f"{k} {v:6.2f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
