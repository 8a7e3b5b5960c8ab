"""Writing the head out: rows per second and daemon CPU, this tree against a baseline.

What an operator waits for after a restart: ``--series`` series of ``--days`` days at
``--step`` s, sent over telnet to a tsd that keeps every row in its head (grace of a day),
which is then killed (-9); each round starts a copy of that data directory with a grace of
1 s, so the daemon replays its write-ahead log and writes every row out, with tsd's own
hourly rollups (rows of a month: each row-hour written rewrites its series' month row).
Timed from the start of the process to ``tsd.head.rows`` = 0 (replay included), with the
daemon's CPU (utime + stime) over the same span. ``--baseline REV`` runs tsd of git
revision REV (bench.ingest.export) on its own copy of the same load, rounds alternating
which goes first; medians.

Run: ``python -m bench.head_writeout [--series N] [--days D] [--step S] [--rounds R]
[--baseline REV]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.ingest import Tsd, cpu_seconds, export, modes, start_tsd
from bench.query import head_rows, send_telnet

#: the load is kept in the head whole (rows an hour old and more are otherwise closed)
KEEP = {"tsd.storage.head.grace": "86400", "tsd.storage.head.max_bytes": str(8 << 30)}
#: the rounds: every row closed a second after its last point
WRITE_OUT = {"tsd.storage.head.grace": "1", "tsd.storage.head.max_bytes": str(8 << 30)}
CONNECTIONS = 4


def lines(series: int, days: int, step: int) -> list[list[bytes]]:
    """Per connection, the load as telnet chunks (hour-aligned, ending an hour ago)."""
    end = (int(time.time()) // 3600 - 1) * 3600
    per: list[list[bytes]] = [[] for _ in range(CONNECTIONS)]
    for at in range(end - days * 86400, end, step):
        for s in range(series):
            per[s % CONNECTIONS].append(
                b"put bench.wo %d %d host=h%05d\n" % (at, (at // step + s) % 1000, s)
            )
    return [[b"".join(part[i : i + 5000]) for i in range(0, len(part), 5000)] for part in per]


async def prepare(into: Path, source: Path | None, load: list[list[bytes]]) -> int:
    """The load in a head, then the daemon killed: a data directory to replay; its rows."""
    tsd = await start_tsd(into, modes()["shared"], source=source, settings=KEEP)
    try:
        await send_telnet(tsd, load)
        return await head_rows(tsd)
    finally:
        tsd.process.kill()
        await tsd.process.wait()


async def write_out(template: Path, run: Path, source: Path | None) -> tuple[float, float]:
    """A copy of ``template`` started with a short grace: (seconds, CPU seconds) until its
    head is empty."""
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(template, run, ignore=shutil.ignore_patterns("*.sock", "*.lock", "LOCK"))
    t0 = time.perf_counter()
    tsd: Tsd = await start_tsd(run, modes()["shared"], source=source, settings=WRITE_OUT)
    try:
        while await head_rows(tsd):  # noqa: ASYNC110 - polling another process's gauge
            await asyncio.sleep(0.2)
        return time.perf_counter() - t0, cpu_seconds(tsd.process.pid)
    finally:
        await tsd.stop()


async def main(args: argparse.Namespace) -> None:
    load = lines(args.series, args.days, args.step)
    points = args.series * args.days * 86400 // args.step
    with tempfile.TemporaryDirectory(prefix="tsd-bench-wo-") as tmp_name:
        tmp = Path(tmp_name)
        sides: dict[str, Path | None] = {"tsd": None}
        if args.baseline:
            sides[f"tsd {args.baseline}"] = export(args.baseline, tmp / "src")
        rows: dict[str, int] = {}
        for name, source in sides.items():
            rows[name] = await prepare(tmp / f"{len(rows)}-template", source, load)
        shape = f"{args.series} series x {args.days} days at {args.step} s"
        print(f"{points:,} points, {shape}: head rows {rows}")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        names = list(sides)
        for round_ in range(args.rounds):
            order = names if round_ % 2 == 0 else names[::-1]
            for name in order:
                index = names.index(name)
                wall, cpu = await write_out(tmp / f"{index}-template", tmp / "run", sides[name])
                results[name].append((wall, cpu))
                print(f"  round {round_ + 1} {name}: {wall:.1f} s, CPU {cpu:.1f} s", flush=True)
        print("\nmedians: head empty after (s), daemon CPU (s), rows per CPU-second")
        first = names[0]
        for name in names:
            wall = statistics.median(w for w, _ in results[name])
            cpu = statistics.median(c for _, c in results[name])
            print(f"  {name}: {wall:.1f} s, {cpu:.1f} CPU-s, {rows[name] / cpu:,.0f} rows/CPU-s")
        if len(names) > 1:
            for name in names[1:]:
                ratio = statistics.median(c for _, c in results[first]) / statistics.median(
                    c for _, c in results[name]
                )
                print(f"  CPU {first} / {name}: {ratio:.2f}x")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--step", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
