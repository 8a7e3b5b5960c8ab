"""Cold ingest: new series per second, this checkout against a baseline commit.

Every point starts a new series that brings an unseen tag value (``host=<new>``; the
metric and the other tag are known after a warm-up line), so each costs a UID assignment,
a row-key template and a series index cell: the burst a collector restart or an
autoscaling event makes. The points go over telnet on ``--connections`` sockets; the clock
stops as in bench/ingest.py (``version`` reply on every connection, then one
``/api/put?sync`` point, then every point stored), and the counters are checked after it.

Two daemons alternate, round by round (which goes first alternates too, and the page
cache is written back between them), each on a fresh store: tsd from this checkout
("after") and tsd from ``--baseline`` (a git ref, default ``main``: "before"), exported
with ``git archive``. Figures are medians over ``--rounds``, per wall-clock second and per
second of the daemon's CPU time, the daemon on CPU 0 and this generator on CPU 1 when the
machine has two.

``--hbase``: the same against one standalone HBase (``scripts/hbase``, as
bench/hbase_ingest.py starts it; fresh tables each round), after one warm-up round of each
daemon that is not counted (a fresh HBase's first rounds are several times slower).

Run: ``python -m bench.new_series [--series N] [--rounds R] [--baseline REF] [--hbase]
[--set KEY=VALUE ...]`` (``--set``: a config key for both daemons).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp

from bench.hbase_ingest import HBase, make_tables, start_hbase, tables
from bench.ingest import (
    BASE_TS,
    Rate,
    Tsd,
    check_count,
    chunks_per_connection,
    export,
    modes,
    rotated,
    send_telnet,
    settle_disk,
    start_tsd,
    timed,
)
from tests.hbase.opentsdb import tsd_hbase_keys

#: goals of issue 11: new series/s on the embedded store; HBase: times the baseline
EMBEDDED_GOAL = 50_000
HBASE_GOAL_RATIO = 5.0


def cold_lines(count: int, tag: str) -> list[bytes]:
    """``count`` points, each of a new series: a tag value never seen before."""
    return [
        b"put cold.cpu %d %d host=%s-%d dc=lga\n" % (BASE_TS + i % 3600, i, tag.encode(), i)
        for i in range(count)
    ]


@contextlib.asynccontextmanager
async def daemon(
    source: Path | None, data_dir: Path, hbase: HBase | None, prefix: str, extra: dict[str, str]
) -> AsyncIterator[Tsd]:
    settings: dict[str, str] = dict(extra)
    if hbase is not None:
        await make_tables(tables(hbase.server, prefix))
        settings |= tsd_hbase_keys(tables(hbase.server, prefix), data_dir)
    mode = next(iter(modes().values()))
    server = await start_tsd(data_dir, mode, source=source, settings=settings)
    try:
        yield server
    finally:
        await server.stop()


async def one_round(
    source: Path | None, data_dir: Path, hbase: HBase | None, prefix: str, args: argparse.Namespace
) -> Rate:
    extra = dict(item.split("=", 1) for item in args.set)
    async with (
        daemon(source, data_dir, hbase, prefix, extra) as server,
        aiohttp.ClientSession() as http,
    ):
        warm = [b"put cold.cpu %d 0 host=warm dc=lga\n" % BASE_TS]
        await timed(server, http, 1, lambda acked: [send_telnet(server, warm, acked)])
        lines = cold_lines(args.series, prefix)
        per = chunks_per_connection(lines, args.connections)
        rate = await timed(
            server,
            http,
            len(lines),
            lambda acked: [send_telnet(server, chunks, acked) for chunks in per],
        )
        await check_count(server, http, len(lines) + 1)
        return rate


async def measure(
    args: argparse.Namespace, baseline: Path, hbase: HBase | None
) -> dict[str, list[Rate]]:
    found: dict[str, list[Rate]] = {"before": [], "after": []}
    sources: dict[str, Path | None] = {"before": baseline, "after": None}
    if hbase is not None:
        # A fresh HBase runs its first rounds several times slower (JIT, first regions):
        # one round of each daemon, not counted, so the first measured round is not the
        # baseline's alone to pay.
        for name, source in sources.items():
            with tempfile.TemporaryDirectory() as tmp:
                rate = await one_round(source, Path(tmp) / "data", hbase, f"warm{name}_", args)
            print(f"  warm-up {name} (not counted): {rate.wall:,.0f} new series/s", flush=True)
    for number in range(args.rounds):
        for name, source in rotated(list(sources.items()), number):
            with tempfile.TemporaryDirectory() as tmp:
                prefix = f"ns{number}{name}_"
                rate = await one_round(source, Path(tmp) / "data", hbase, prefix, args)
            settle_disk()
            found[name].append(rate)
            print(f"  round {number + 1} {name}: {rate.wall:,.0f} new series/s", flush=True)
    return found


def median(rates: list[Rate], field: Callable[[Rate], float]) -> float:
    return statistics.median(field(rate) for rate in rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="main", help="git ref of the 'before' daemon")
    parser.add_argument("--hbase", action="store_true", help="on a standalone HBase")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="to both daemons"
    )
    args = parser.parse_args()
    os.sched_setaffinity(0, next(iter(modes().values())).generator_cpus)
    store = "HBase" if args.hbase else "the embedded store"
    print(
        f"cold ingest on {store}: {args.series:,} new series (one new tag value each),"
        f" {args.connections} telnet connections; before = {args.baseline}, after = this"
        f" checkout; {args.rounds} alternating rounds, medians"
    )
    with tempfile.TemporaryDirectory() as tmp:
        baseline = export(args.baseline, Path(tmp) / "baseline")
        hbase = start_hbase(Path(tmp) / "hbase") if args.hbase else None
        try:
            found = asyncio.run(measure(args, baseline, hbase))
        finally:
            if hbase is not None:
                hbase.stop()
    before, after = found["before"], found["after"]
    for name, rates in found.items():
        wall, cpu = median(rates, lambda r: r.wall), median(rates, lambda r: r.cpu)
        print(f"  {name:7} {wall:10,.0f} new series/s wall, {cpu:10,.0f} per daemon CPU-second")
    ratio = median(after, lambda r: r.wall) / median(before, lambda r: r.wall)
    cpu_ratio = median(after, lambda r: r.cpu) / median(before, lambda r: r.cpu)
    print(f"  after/before: {ratio:.1f}x wall, {cpu_ratio:.1f}x per CPU-second")
    if args.hbase:
        verdict = "met" if ratio >= HBASE_GOAL_RATIO else "not met"
        print(f"  goal: >= {HBASE_GOAL_RATIO:.0f}x the baseline on HBase: {verdict}")
    else:
        rate = median(after, lambda r: r.wall)
        verdict = "met" if rate >= EMBEDDED_GOAL else "not met"
        print(f"  goal: >= {EMBEDDED_GOAL:,} new series/s on the embedded store: {verdict}")


if __name__ == "__main__":
    main()
