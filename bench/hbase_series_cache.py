"""Bytes per cached series on HBase, and the bound ``tsd.core.series_cache.size`` puts on
them (issue 26: "on HBase: memory per cached series reported").

On HBase nothing but the series caches grows with the number of series: the ingest
service's and the protocols' refs (a telnet line's key and its row-key template), meta
tracking's written TSUIDs, and the UID caches (which grow with names, as OpenTSDB's do).
So each round runs tsd twice on a standalone HBase (``scripts/hbase``), each on fresh
tables, fed the same ``--series`` new series (one point each, over ``--connections``
telnet sockets) from a daemon just started:

* **all**: ``tsd.core.series_cache.size`` above ``--series``: every series stays cached;
* **capped**: the size at ``--cap``: the caches hold ``--cap`` series, the rest evicted.

Both assign the same UIDs and cache the same names; they differ only in the series cached.
Printed per run: RSS after (every point stored, meta tracking done) minus RSS at start,
per series, and the ``ingest.series_cached`` gauge; per round: **bytes per cached
series** = (growth of all - growth of capped) / (series - cap), and the capped run's
growth per series (what the bound leaves: names, allocator slack). Rounds alternate.

Run: ``python -m bench.hbase_series_cache [--series N] [--cap C] [--rounds R]
[--port P]`` (``--port``: the first of two ports tsd may listen on; 0: any). Needs java.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.cardinality import rss_bytes
from bench.hbase_ingest import (
    make_tables,
    progress,
    send_lines,
    start_hbase,
    start_tsd,
    stat,
    tables,
    wait_for,
)
from tests.hbase_harness import HBaseServer

METRIC = b"sc.m"


@dataclass
class Run:
    name: str
    cap: int
    growth: int
    cached: int
    seconds: float


def lines(series: int) -> list[bytes]:
    now = int(time.time())
    return [b"put %s %d %d host=h%d dc=lga\n" % (METRIC, now, n, n) for n in range(series)]


async def one_run(
    server: HBaseServer, workdir: Path, name: str, cap: int, args: argparse.Namespace, port: int
) -> Run:
    prefix = f"sc{name}{time.monotonic_ns()}_"
    cfg = tables(server, prefix)
    await make_tables(cfg)
    extra = {"tsd.core.series_cache.size": str(cap)}
    process, port = await start_tsd(cfg, None, workdir / prefix, extra, port=port)
    try:
        async with aiohttp.ClientSession() as http:
            await asyncio.sleep(1.0)  # settled after start
            idle = rss_bytes(process.pid)
            began = time.monotonic()
            await send_lines(port, lines(args.series), args.connections)

            async def done() -> bool:
                stored = await stat(http, port, "tsd.datapoints.stored")
                tracked = await stat(http, port, "tsd.meta.series_tracked")
                return bool(stored >= args.series and tracked >= args.series)

            await wait_for(done, f"{args.series} points stored and tracked")
            seconds = time.monotonic() - began
            await asyncio.sleep(1.0)
            growth = rss_bytes(process.pid) - idle
            cached = await stat(http, port, "tsd.ingest.series_cached")
    finally:
        process.terminate()
        await process.wait()
    run = Run(name, cap, growth, cached, seconds)
    progress(
        f"{name}: cap {cap:,}, {cached:,} cached, RSS +{growth / 2**20:,.1f} MiB,"
        f" {growth / args.series:,.0f} bytes/series, {args.series / seconds:,.0f} series/s"
    )
    return run


async def measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tsd-sc-") as tmp:
        workdir = Path(tmp)
        hbase = start_hbase(workdir / "hbase")
        try:
            per_cached: list[float] = []
            for number in range(args.rounds):
                order = [("all", args.series * 2), ("capped", args.cap)]
                if number % 2:
                    order.reverse()
                runs = {}
                for name, cap in order:
                    port = args.port + (name == "capped") if args.port else 0
                    runs[name] = await one_run(hbase.server, workdir, name, cap, args, port)
                full, capped = runs["all"], runs["capped"]
                figure = (full.growth - capped.growth) / (args.series - args.cap)
                per_cached.append(figure)
                print(
                    f"round {number + 1}: {figure:,.0f} bytes per cached series;"
                    f" capped at {args.cap:,}: {capped.cached:,} cached,"
                    f" {capped.growth / args.series:,.0f} bytes/series of RSS growth"
                    f" (all cached: {full.growth / args.series:,.0f})",
                    flush=True,
                )
            per_cached.sort()
            print(
                f"bytes per cached series on HBase, median of {args.rounds}:"
                f" {per_cached[len(per_cached) // 2]:,.0f}"
            )
        finally:
            hbase.stop()


#: the options (all integers) and their defaults
OPTIONS = {"series": 200_000, "cap": 20_000, "connections": 4, "rounds": 2, "port": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in OPTIONS.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
