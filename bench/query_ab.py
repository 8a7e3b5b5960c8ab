"""A small query's cost, this tree's tsd against another commit's, many queries per round.

bench/query_matrix.py times each shape once per round: seven samples, whose p50 moves by
more than a change of a tenth of a small query's cost. Here two daemons (this tree and
``--baseline REV``, bench.ingest.export) are loaded with the same lines (the matrix's
``bench.cpu`` and ``bench.wide``, checked against numpy's answer before anything is timed)
and asked, round after round with the first side alternating, ``--queries`` queries of a
shape each: back to back (warm: the caches hot) and ``--gap-ms`` apart (each query after an
idle pause, as a dashboard's and the matrix's are). Per shape and spacing: the p50 of the
wall time per query over all rounds, the median over the rounds of the server's CPU per
query (/proc, all threads, over a round's queries), and this tree / the baseline. Both
phases as the matrix: rows in the head (fresh), then both daemons restarted on what they
wrote out (written out).

Run: ``python -m bench.query_ab --baseline main [--shapes filter,raw] [--queries 100]
[--rounds 8] [--gap-ms 20] [--series 250] [--wide 10000]``;
``TSD_BENCH_PORTS=LOW-HIGH`` keeps the daemons' ports in that range.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.ingest import Server, cpu_seconds, export, modes, start_tsd
from bench.query import head_rows, running
from bench.query_matrix import (
    FRESH_SETTINGS,
    SHAPE_DATA,
    TSD_SETTINGS,
    Shape,
    Side,
    check,
    datasets,
    head_empty,
    load,
    shapes,
)
from bench.query_matrix import parse_args as matrix_args


async def timed_round(
    side: Side, session: aiohttp.ClientSession, shape: Shape, n: int, gap: float
) -> tuple[list[float], float]:
    """``n`` queries of ``shape``: each one's wall time, and the server's CPU per query."""
    pid = side.server.process.pid
    walls: list[float] = []
    c0 = cpu_seconds(pid)
    for _ in range(n):
        if gap:
            await asyncio.sleep(gap)
        t0 = time.perf_counter()
        await side.ask(session, shape)
        walls.append(time.perf_counter() - t0)
    return walls, (cpu_seconds(pid) - c0) / n


async def compare(sides: list[Side], todo: dict[str, Shape], args: argparse.Namespace) -> None:
    async with aiohttp.ClientSession() as session:
        for side in sides:  # the answers checked, the caches warmed
            for shape in todo.values():
                check(side.name, shape, side.parse(shape, await side.ask(session, shape)))
        for gap in (0.0, args.gap_ms / 1000):
            for name, shape in todo.items():
                walls: dict[str, list[float]] = {s.name: [] for s in sides}
                cpus: dict[str, list[float]] = {s.name: [] for s in sides}
                for r in range(args.rounds):
                    for side in sides[r % 2 :] + sides[: r % 2]:
                        w, c = await timed_round(side, session, shape, args.queries, gap)
                        walls[side.name] += w
                        cpus[side.name].append(c)
                this, base = sides[0].name, sides[1].name
                wall = {k: statistics.median(v) for k, v in walls.items()}
                cpu = {k: statistics.median(v) for k, v in cpus.items()}
                print(
                    f"    {name:<7} {'warm' if not gap else f'{args.gap_ms:g} ms apart':<12}"
                    + "".join(
                        f"  {k} {wall[k] * 1e3:6.2f} ms ({cpu[k] * 1e3:5.2f} ms CPU)" for k in wall
                    )
                    + f"  = {wall[this] / wall[base]:.2f}x ({cpu[this] / cpu[base]:.2f}x CPU)",
                    flush=True,
                )


async def main(args: argparse.Namespace) -> None:
    names = [n for n in args.shapes.split(",") if n]
    data = datasets(matrix_args(["--series", str(args.series), "--wide", str(args.wide)]))
    every = shapes(data)
    unknown = set(names) - set(every)
    if unknown:
        raise SystemExit(f"--shapes: no shape {sorted(unknown)}")
    todo = {n: every[n] for n in names}
    needed = {SHAPE_DATA[n] for n in names}
    chunks = {k: d.chunks(4) for k, d in data.items() if k in needed}
    mode = modes()["shared"]
    print(
        f"{args.rounds} rounds of {args.queries} queries per shape and side; "
        f"tsd (this tree) against tsd {args.baseline}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="tsd-ab-") as tmp_name:
        tmp = Path(tmp_name)
        baseline = export(args.baseline, tmp / "rev")
        for phase, settings in (
            ("fresh", {**TSD_SETTINGS, **FRESH_SETTINGS}),
            ("written out", TSD_SETTINGS),
        ):
            starts = (
                start_tsd(tmp / "tsd", mode, settings=settings),
                start_tsd(tmp / "tsd-rev", mode, source=baseline, settings=settings),
            )
            async with running(starts[0]) as tsd, running(starts[1]) as rev:
                assert tsd is not None
                assert rev is not None
                servers: list[Server] = [tsd, rev]
                sides = [Side("tsd", tsd), Side(f"tsd {args.baseline}", rev)]
                for side in sides:
                    if phase == "fresh":
                        print(f"  load {side.name}: {await load(side.server, chunks)}", flush=True)
                    else:
                        await head_empty(side.server)
                rows = [await head_rows(s) for s in servers]
                print(f"  {phase}: tsd.head.rows {rows}", flush=True)
                await compare(sides, todo, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision of the other tsd")
    parser.add_argument("--shapes", default="filter,raw", help="the matrix's shape names")
    parser.add_argument("--queries", type=int, default=100, help="per round, shape and side")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="the spaced queries' pause")
    parser.add_argument("--series", type=int, default=250, help="bench.cpu's series")
    parser.add_argument("--wide", type=int, default=10_000, help="bench.wide's series")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args(argv)))


if __name__ == "__main__":
    run()
