"""Bytes per cached series on HBase, and the bound ``tsd.core.series_cache.size`` puts on
them (issue 26: "on HBase: memory per cached series reported").

On HBase nothing but the series caches grows with the number of series: the ingest
service's and the protocols' refs (a telnet line's key and its row-key template), meta
tracking's written TSUIDs, and the UID caches (which grow with names, as OpenTSDB's do).
So each round runs tsd twice on a standalone HBase (``scripts/hbase``), each on fresh
tables, fed the same new series (one point each, over ``--connections`` telnet sockets)
in two halves of ``--series // 2``: the first warms the daemon up (its buffers, the
allocator's arenas, the caches filled to ``--cap``), the second is measured: RSS after it
(every point stored, meta tracking done) minus RSS before it.

* **all**: ``tsd.core.series_cache.size`` above ``--series``: every series stays cached;
* **capped**: the size at ``--cap``: the caches hold ``--cap`` series, the rest evicted
  (the memory of those evicted is reused by the next ones).

Both assign the same UIDs and cache the same names; they differ only in the series cached.
Printed per run: the measured half's RSS growth per series and the
``ingest.series_cached`` gauge; per round: **bytes per cached series** = (growth of all -
growth of capped) / (series in the measured half), and the capped run's growth per
series (what the bound leaves: the UID caches' names, allocator slack). Rounds alternate.

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


def lines(first: int, last: int) -> list[bytes]:
    now = int(time.time())
    return [b"put %s %d %d host=h%d dc=lga\n" % (METRIC, now, n, n) for n in range(first, last)]


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
            half = args.series // 2
            rss = []
            began = time.monotonic()
            for first in (0, half):
                await send_lines(port, lines(first, first + half), args.connections)

                async def done(target: int = first + half) -> bool:
                    stored = await stat(http, port, "tsd.datapoints.stored")
                    tracked = await stat(http, port, "tsd.meta.series_tracked")
                    return bool(stored >= target and tracked >= target)

                await wait_for(done, f"{first + half} points stored and tracked")
                await asyncio.sleep(1.0)
                rss.append(rss_bytes(process.pid))
            seconds = time.monotonic() - began
            growth = rss[1] - rss[0]
            cached = await stat(http, port, "tsd.ingest.series_cached")
    finally:
        process.terminate()
        await process.wait()
    run = Run(name, cap, growth, cached, seconds)
    half = args.series // 2
    progress(
        f"{name}: cap {cap:,}, {cached:,} cached, measured half RSS +{growth / 2**20:,.1f} MiB,"
        f" {growth / half:,.0f} bytes/series, {args.series / seconds:,.0f} series/s"
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
                half = args.series // 2
                figure = (full.growth - capped.growth) / half
                per_cached.append(figure)
                print(
                    f"round {number + 1}: {figure:,.0f} bytes per cached series;"
                    f" capped at {args.cap:,}: {capped.cached:,} cached,"
                    f" {capped.growth / half:,.0f} bytes/series of RSS growth"
                    f" (all cached: {full.growth / half:,.0f})",
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
