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
daemon that is not counted (a fresh HBase's first rounds are several times slower). Per
round it also reports the checkAndPut calls per new name, counted at tsd's storage layer
(``tsd.storage.check_and_puts`` in /metrics; a baseline without that counter shows "-"),
and the CPU per new series of tsd, of the Thrift gateway and of HBase's JVM (the
standalone master, region server and ZooKeeper in one process). The warm-up rounds check
the count once against the gateway's own counters (``CheckAndPut_num_ops`` of its
``/jmx``, the gateway's info server turned on for this run), for both daemons.

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
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.hbase_ingest import HBase, cpu_seconds, free_port, make_tables, start_hbase, tables
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

#: goal of issue 26 (was 50,000, issue 11's): new series/s on the embedded store, visible
#: to queries
EMBEDDED_GOAL = 100_000
#: goals of issue 28 on HBase: times the baseline (wall-clock and per HBase-side
#: CPU-second), and checkAndPut calls per new name
HBASE_GOAL_RATIO = 1.5
HBASE_CHECKS_GOAL = 1.1
#: how long the gateway's /jmx figures may lag behind its calls (Hadoop metrics refresh
#: their JMX view every 10 s)
JMX_SETTLE_S = 12.0
#: tsd's count of check-and-puts, one per checked cell (tsd/storage/instrumented.py)
TSD_CHECKS = "tsd_storage_check_and_puts_total"


@dataclass
class Round:
    """One burst: its rate, and on HBase what it cost around the store."""

    rate: Rate
    series: int
    #: tsd's check-and-puts per new name (None: the daemon does not count them)
    tsd_checks: float | None = None
    #: the gateway's checkAndPut calls per new name (None: not checked this round)
    gateway_checks: float | None = None
    #: CPU seconds over the burst: the Thrift gateway, HBase's JVM
    gateway_cpu_s: float = 0.0
    hbase_cpu_s: float = 0.0

    @property
    def hbase_side_rate(self) -> float:
        """New series per CPU-second of the gateway and HBase together."""
        return self.series / max(self.gateway_cpu_s + self.hbase_cpu_s, 1e-3)


async def tsd_checks(server: Tsd, http: aiohttp.ClientSession) -> float | None:
    async with http.get(f"http://127.0.0.1:{server.port}/metrics") as response:
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == TSD_CHECKS:
                return float(sample.value)
    return None


async def gateway_checks(info_port: int, http: aiohttp.ClientSession) -> float:
    """The gateway's checkAndPut calls so far (its per-method histogram's count)."""
    url = f"http://127.0.0.1:{info_port}/jmx?qry=Hadoop:service=HBase,name=Thrift,sub=ThriftOne"
    async with http.get(url) as response:
        beans = (await response.json())["beans"]
    return float(
        sum(
            value
            for bean in beans
            for key, value in bean.items()
            if key.lower() == "checkandput_num_ops"
        )
    )


@dataclass
class HBaseSide:
    """Counters read before and after a burst."""

    tsd_checks: float | None
    gateway_checks: float | None
    gateway_cpu_s: float
    hbase_cpu_s: float


async def hbase_side(
    hbase: HBase, server: Tsd, http: aiohttp.ClientSession, info_port: int | None
) -> HBaseSide:
    pids = hbase.pids()
    gateway_cpu, hbase_cpu = cpu_seconds(pids["thrift"]), cpu_seconds(pids["hbase"])
    gateway = None if info_port is None else await gateway_checks(info_port, http)
    return HBaseSide(await tsd_checks(server, http), gateway, gateway_cpu, hbase_cpu)


def per(after: float | None, before: float | None, count: int) -> float | None:
    return None if after is None or before is None else (after - before) / count


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
    source: Path | None,
    data_dir: Path,
    hbase: HBase | None,
    prefix: str,
    args: argparse.Namespace,
    info_port: int | None = None,
) -> Round:
    """One burst of new series; on HBase with its checkAndPut calls and CPU around the
    store (and the gateway's own count of checkAndPut calls when ``info_port`` is given)."""
    extra = dict(item.split("=", 1) for item in args.set)
    async with (
        daemon(source, data_dir, hbase, prefix, extra) as server,
        aiohttp.ClientSession() as http,
    ):
        warm = [b"put cold.cpu %d 0 host=warm dc=lga\n" % BASE_TS]
        await timed(server, http, 1, lambda acked: [send_telnet(server, warm, acked)])
        lines = cold_lines(args.series, prefix)
        chunks = chunks_per_connection(lines, args.connections)
        if hbase is not None and info_port is not None:
            await asyncio.sleep(JMX_SETTLE_S)  # the warm-up line's calls in the gateway's view
        start = None if hbase is None else await hbase_side(hbase, server, http, info_port)
        rate = await timed(
            server,
            http,
            len(lines),
            lambda acked: [send_telnet(server, part, acked) for part in chunks],
        )
        found = Round(rate, len(lines))
        if hbase is not None and start is not None:
            end = await hbase_side(hbase, server, http, None)
            found.gateway_cpu_s = end.gateway_cpu_s - start.gateway_cpu_s
            found.hbase_cpu_s = end.hbase_cpu_s - start.hbase_cpu_s
            found.tsd_checks = per(end.tsd_checks, start.tsd_checks, len(lines))
            if info_port is not None:
                await asyncio.sleep(JMX_SETTLE_S)
                gateway = await gateway_checks(info_port, http)
                found.gateway_checks = per(gateway, start.gateway_checks, len(lines))
        await check_count(server, http, len(lines) + 1)
        return found


def describe(found: Round, hbase: bool) -> str:
    text = f"{found.rate.wall:,.0f} new series/s"
    if not hbase:
        return text
    checks = "-" if found.tsd_checks is None else f"{found.tsd_checks:.3f}"
    text += f"; checkAndPut/new name {checks} (tsd)"
    if found.gateway_checks is not None:
        text += f", {found.gateway_checks:.3f} (gateway's /jmx)"
    us = 1e6 / found.series
    return text + (
        f"; CPU us/new series: tsd {1e6 / found.rate.cpu:.0f}, gateway"
        f" {found.gateway_cpu_s * us:.0f}, HBase JVM {found.hbase_cpu_s * us:.0f}"
    )


async def measure(
    args: argparse.Namespace, baseline: Path, hbase: HBase | None, info_port: int | None
) -> dict[str, list[Round]]:
    found: dict[str, list[Round]] = {"before": [], "after": []}
    sources: dict[str, Path | None] = {"before": baseline, "after": None}
    if hbase is not None:
        # A fresh HBase runs its first rounds several times slower (JIT, first regions):
        # one round of each daemon, not counted, so the first measured round is not the
        # baseline's alone to pay. These rounds check the count against the gateway's.
        for name, source in sources.items():
            with tempfile.TemporaryDirectory() as tmp:
                warm = await one_round(
                    source, Path(tmp) / "data", hbase, f"warm{name}_", args, info_port
                )
            print(f"  warm-up {name} (not counted): {describe(warm, True)}", flush=True)
    for number in range(args.rounds):
        for name, source in rotated(list(sources.items()), number):
            with tempfile.TemporaryDirectory() as tmp:
                prefix = f"ns{number}{name}_"
                measured = await one_round(source, Path(tmp) / "data", hbase, prefix, args)
            settle_disk()
            found[name].append(measured)
            text = describe(measured, hbase is not None)
            print(f"  round {number + 1} {name}: {text}", flush=True)
    return found


def median(rounds: list[Round], field: Callable[[Round], float]) -> float:
    return statistics.median(field(found) for found in rounds)


def report_hbase(found: dict[str, list[Round]]) -> None:
    """Medians of the HBase figures, the ratios and the goals of issue 28."""
    for name, rounds in found.items():
        side = median(rounds, lambda r: r.hbase_side_rate)
        gateway_us = median(rounds, lambda r: r.gateway_cpu_s * 1e6 / r.series)
        hbase_us = median(rounds, lambda r: r.hbase_cpu_s * 1e6 / r.series)
        checks = [r.tsd_checks for r in rounds if r.tsd_checks is not None]
        shown = f"{statistics.median(checks):.3f}" if checks else "-"
        print(
            f"  {name:7} {side:10,.0f} new series per HBase-side CPU-second; CPU us/new series:"
            f" gateway {gateway_us:.0f}, HBase JVM {hbase_us:.0f}; checkAndPut/new name {shown}"
        )
    before, after = found["before"], found["after"]
    ratio = median(after, lambda r: r.rate.wall) / median(before, lambda r: r.rate.wall)
    side_ratio = median(after, lambda r: r.hbase_side_rate) / median(
        before, lambda r: r.hbase_side_rate
    )
    print(f"  after/before: {ratio:.2f}x wall, {side_ratio:.2f}x per HBase-side CPU-second")
    verdict = "met" if min(ratio, side_ratio) >= HBASE_GOAL_RATIO else "not met"
    print(f"  goal: >= {HBASE_GOAL_RATIO}x the baseline, wall and HBase-side: {verdict}")
    checks = [r.tsd_checks for r in after if r.tsd_checks is not None]
    if checks:
        most = max(checks)
        verdict = "met" if most <= HBASE_CHECKS_GOAL else "not met"
        print(
            f"  goal: <= {HBASE_CHECKS_GOAL} checkAndPut per new name (most: {most:.3f}): {verdict}"
        )


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
        info_port = free_port() if args.hbase else None
        hbase = start_hbase(Path(tmp) / "hbase", info_port) if args.hbase else None
        try:
            found = asyncio.run(measure(args, baseline, hbase, info_port))
        finally:
            if hbase is not None:
                hbase.stop()
    before, after = found["before"], found["after"]
    for name, rounds in found.items():
        wall, cpu = median(rounds, lambda r: r.rate.wall), median(rounds, lambda r: r.rate.cpu)
        print(f"  {name:7} {wall:10,.0f} new series/s wall, {cpu:10,.0f} per daemon CPU-second")
    ratio = median(after, lambda r: r.rate.wall) / median(before, lambda r: r.rate.wall)
    cpu_ratio = median(after, lambda r: r.rate.cpu) / median(before, lambda r: r.rate.cpu)
    print(f"  after/before: {ratio:.2f}x wall, {cpu_ratio:.2f}x per daemon CPU-second")
    if args.hbase:
        report_hbase(found)
    else:
        rate = median(after, lambda r: r.rate.wall)
        verdict = "met" if rate >= EMBEDDED_GOAL else "not met"
        print(f"  goal: >= {EMBEDDED_GOAL:,} new series/s on the embedded store: {verdict}")


if __name__ == "__main__":
    main()
