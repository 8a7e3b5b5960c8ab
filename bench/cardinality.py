"""Cardinality: the most series at one point per 10 s that tsd sustains, VictoriaMetrics beside.

N series each send one point every 10 s of *simulated* time: interval k carries every
series' point at ``start + 10 k``, and is sent as soon as interval k-1 is accepted, so a
run crosses hours of data in minutes. The start is 10 s before an hour boundary, so the
first hour closes after the first interval and the next after 360 more (``--intervals``
defaults to crossing two hour closes; fewer makes a quick run that says so).

An interval is *accepted* when every connection that carried it has its answer: for tsd
the ``version`` reply after its last line (every earlier line handled, see bench/ingest.py),
for VictoriaMetrics the server closing the connection after our half-close. A load of N is
*sustained* when every interval after the first is accepted within ``--budget`` seconds
(10: the real time the interval stands for) and the daemon's RSS stays under
``--max-rss-gb``. The first interval registers the N series (every one new: UID
assignment, series index; cold ingest, bench/new_series.py) and is reported apart, with
its new series per second; ``--first-budget S`` holds it to a budget too. N starts at
``--start`` and is multiplied by ``--factor`` until a load is not sustained (or N passes
``--max-series``); each N runs on a fresh daemon and store.

tsd runs with ``tsd.storage.head.max_bytes`` at ``--head-gb`` (default 4 GiB): the head
holds each open row-hour, about 360 bytes per row plus its points, so N series need N x
(360 + 360 points x ~3.5 bytes) to keep an hour in memory; below that it writes rows out
before their hour closes and merges them again (a million series pass the default
256 MiB with the rows alone). ``--set KEY=VALUE`` passes any other key to tsd.

Reported per N and server: sustained or why not, the first interval, the slowest and the
p99 interval accept time, the p99 latency of one probe put per interval (its own
connection, ``version`` round trip / half-close; sent while the interval is in flight),
the RSS at the end (anonymous memory and mapped files, LMDB's pages, apart) and the RSS
per series above the idle daemon's. Both servers share the machine's cores with this
generator (no pinning), VictoriaMetrics with its default GOMAXPROCS.

Run: ``python -m bench.cardinality [--start N] [--factor F] [--max-series N]
[--intervals K] [--max-rss-gb G] [--head-gb G] [--first-budget S] [--set K=V] [--no-vm]
[--baseline REF]`` (``--baseline``: tsd of git REF too, each N on it first, then this tree).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.ingest import (
    CHUNK,
    Mode,
    Server,
    export,
    modes,
    start_tsd,
    start_vm,
)

INTERVAL_S = 10
#: the placeholder of the timestamp in an interval's pre-built lines (10 digits, as a
#: timestamp in seconds has)
STAMP = b"TTTTTTTTTT"


def hour_start() -> int:
    """10 s before an hour boundary, three hours back: every interval stays in the past."""
    return (int(time.time()) // 3600 - 3) * 3600 - INTERVAL_S


def templates(series: int, connections: int) -> list[bytes]:
    """Per connection, one interval's lines with STAMP for the timestamp."""
    per: list[list[bytes]] = [[] for _ in range(connections)]
    for i in range(series):
        per[i % connections].append(b"put card.cpu %s %d host=h%d dc=lga\n" % (STAMP, i % 97, i))
    return [b"".join(lines) for lines in per]


def memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of a process, in bytes (Linux /proc)."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            found[name] = int(rest.split()[0]) * 1024
    return found


def rss_bytes(pid: int) -> int:
    return memory(pid).get("VmRSS", 0)


async def send(server: Server, data: bytes) -> float:
    """Send ``data`` on a new connection and wait for the server's answer; seconds taken."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for at in range(0, len(data), CHUNK):
        writer.write(data[at : at + CHUNK])
        await writer.drain()
    await server.end_telnet(reader, writer)
    return time.perf_counter() - start


@dataclass
class Load:
    server: str
    series: int
    intervals: int
    sustained: bool
    why: str
    #: the first interval: every series new (UID assignment, series index)
    first_s: float
    slowest_s: float
    p99_s: float
    probe_p99_s: float
    rss: int
    rss_per_series: float
    #: anonymous memory and mapped files (the embedded store's pages) at the end
    anon: int
    mapped: int


def p99(samples: list[float]) -> float:
    if len(samples) < 2:
        return max(samples, default=0.0)
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


async def run_load(
    start: Callable[[Path, Mode], Awaitable[Server | None]],
    series: int,
    args: argparse.Namespace,
) -> Load | None:
    mode = modes()["shared"]
    with tempfile.TemporaryDirectory() as tmp:
        server = await start(Path(tmp) / "data", mode)
        if server is None:
            return None
        try:
            return await drive(server, series, args)
        finally:
            await server.stop()


async def drive(server: Server, series: int, args: argparse.Namespace) -> Load:
    pid = server.process.pid
    idle = rss_bytes(pid)
    payloads = templates(series, args.connections)
    first = hour_start()
    accepted: list[float] = []
    probes: list[float] = []
    why = ""
    rss = idle
    for k in range(args.intervals):
        stamp = b"%010d" % (first + INTERVAL_S * k)
        data = [payload.replace(STAMP, stamp) for payload in payloads]
        probe = b"put card.probe %s %d host=probe\n" % (stamp, k)
        began = time.perf_counter()
        *_, probe_s = await asyncio.gather(
            *(send(server, part) for part in data), send(server, probe)
        )
        accepted.append(time.perf_counter() - began)
        probes.append(probe_s)
        rss = rss_bytes(pid)
        if args.progress and (k % args.progress == 0 or accepted[-1] > args.budget):
            print(
                f"    {server.name} N={series:,} interval {k}: {accepted[-1]:.2f} s,"
                f" max after the first {max(accepted[1:], default=0.0):.2f} s,"
                f" RSS {rss / 2**20:,.0f} MiB",
                flush=True,
            )
        budget = args.budget if k else args.first_budget
        if budget is not None and accepted[-1] > budget:
            why = f"interval {k} took {accepted[-1]:.1f} s"
            break
        if rss > args.max_rss_gb * 2**30:
            why = f"RSS {rss / 2**30:.1f} GiB after interval {k}"
            break
    steady = accepted[1:] or accepted
    end = memory(pid)
    return Load(
        server.name,
        series,
        len(accepted),
        not why,
        why,
        accepted[0],
        max(steady),
        p99(steady),
        p99(probes),
        rss,
        (rss - idle) / series,
        end.get("RssAnon", 0),
        end.get("RssFile", 0),
    )


def report(load: Load) -> None:
    verdict = "sustained" if load.sustained else f"NOT sustained ({load.why})"
    print(
        f"  {load.server:16} N={load.series:>10,}: {verdict}; {load.intervals} intervals,"
        f" first (all new) {load.first_s:.2f} s ({load.series / load.first_s:,.0f} new"
        f" series/s), then accept p99 {load.p99_s:.2f} s (max {load.slowest_s:.2f} s),"
        f" probe put p99 {load.probe_p99_s * 1000:.0f} ms, RSS {load.rss / 2**20:,.0f} MiB"
        f" (anon {load.anon / 2**20:,.0f}, mapped {load.mapped / 2**20:,.0f}),"
        f" {load.rss_per_series:,.0f} bytes/series",
        flush=True,
    )


async def measure(args: argparse.Namespace, baseline: Path | None = None) -> dict[str, int]:
    """The largest N each server sustained (``baseline``: a tsd tree run beside this one,
    named ``tsd@REF``)."""
    settings = {"tsd.storage.head.max_bytes": str(int(args.head_gb * 2**30))}
    settings |= dict(item.split("=", 1) for item in args.set)

    async def tsd(data_dir: Path, mode: Mode) -> Server:
        return await start_tsd(data_dir, mode, settings=settings)

    async def tsd_baseline(data_dir: Path, mode: Mode) -> Server:
        server = await start_tsd(data_dir, mode, source=baseline, settings=settings)
        server.name = f"tsd@{args.baseline}"
        return server

    servers: list[tuple[str, Callable[[Path, Mode], Awaitable[Server | None]]]] = [("tsd", tsd)]
    if baseline is not None:
        servers.insert(0, (f"tsd@{args.baseline}", tsd_baseline))
    if not args.no_vm:
        servers.append(("victoria-metrics", start_vm))
    best: dict[str, int] = {}
    active = dict(servers)
    series = args.start
    while active and series <= args.max_series:
        for name, start in list(active.items()):
            load = await run_load(start, series, args)
            if load is None:
                del active[name]
                continue
            report(load)
            if load.sustained:
                best[name] = series
            else:
                del active[name]
        series = int(series * args.factor)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=10_000)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--max-series", type=int, default=4_000_000)
    parser.add_argument("--intervals", type=int, default=362, help="362: across two hour closes")
    parser.add_argument("--budget", type=float, default=INTERVAL_S)
    parser.add_argument(
        "--first-budget", type=float, help="hold the first (all new) interval to it too"
    )
    parser.add_argument(
        "--progress", type=int, default=0, metavar="K", help="a line every K intervals"
    )
    parser.add_argument("--head-gb", type=float, default=4.0, help="tsd's head.max_bytes")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a tsd config key"
    )
    parser.add_argument("--max-rss-gb", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument(
        "--baseline", metavar="REF", help="also run tsd of git REF (exported), before this tree"
    )
    args = parser.parse_args()
    closes = 0 if args.intervals < 2 else 1 + (args.intervals - 2) // (3600 // INTERVAL_S)
    print(
        f"cardinality: one point per series per {INTERVAL_S} s of simulated time,"
        f" {args.intervals} intervals ({closes} hour closes), sustained = every interval"
        f" after the first accepted within {args.budget:g} s and RSS under"
        f" {args.max_rss_gb:g} GiB (first interval: registration, "
        + ("no budget" if args.first_budget is None else f"budget {args.first_budget:g} s")
        + f"); tsd head.max_bytes {args.head_gb:g} GiB;"
        f" N from {args.start:,} x{args.factor:g}; {args.connections} connections per"
        " interval; server and generator share every core"
    )
    with contextlib.suppress(KeyboardInterrupt), tempfile.TemporaryDirectory() as tmp:
        baseline = None if args.baseline is None else export(args.baseline, Path(tmp) / "base")
        best = asyncio.run(measure(args, baseline))
        for name, series in best.items():
            print(f"  largest N sustained, {name}: {series:,}")


if __name__ == "__main__":
    main()
