"""Prometheus remote write into tsd: samples/s per daemon CPU-second, against telnet on the
same series, and against VictoriaMetrics' own /api/v1/write in the same run (issue 30).

One tsd (``tsdb tsd``, embedded store) takes both of its scenarios; VictoriaMetrics
(Debian's ``victoria-metrics``) runs beside it, started as bench/ingest.py starts it.

* Series: ``--series`` series of ``node_cpu_seconds_total`` with Prometheus' labels
  (``instance="hostN:9100"``, ``job``, ``cpu``, ``mode``): the ``:`` of ``instance`` is
  escaped by tsd's mapping, so the telnet lines name the same OpenTSDB series
  (``instance=hostN_.3A9100``) as remote write stores.
* Requests as Prometheus 2.42 sends them: each sample its own ``TimeSeries`` with all its
  labels, snappy-compressed, over ``--connections`` connections at once (its shards).
  ``--per-request`` lists the request sizes measured (each a scenario of its own, for tsd
  and VictoriaMetrics); the first is the headline: 500, the ``max_samples_per_send`` of
  Debian's Prometheus 2.42 left at its default (its own gauge
  ``prometheus_remote_storage_max_samples_per_send`` says 500, and a capture of what it
  sends under a backlog shows 500-sample requests), 2,000 beside it. Bodies and lines are
  built before the clock starts.
* A warm-up round writes every series once on each server (steady state: the series are
  known, as after Prometheus' first scrape), outside the measurement.
* Clock: tsd remote write: the reply to the last request (tsd answers once the
  write-ahead log holds the request's samples), then the same ``/api/put?sync`` point and
  stats check as the telnet scenario (bench/ingest.py's Tsd.end_round: every point in the
  head). tsd telnet: ``version`` replies, then
  that sync point. VictoriaMetrics: the reply to the last request.
* CPU: utime + stime of the server process and its children (/proc) over the round.

``--floor`` adds, for each request size, what the protobuf runtime alone costs: the
round's bodies decoded in this process (:func:`~tsd.protocol.prom_wire.decode_write_columns`:
snappy, the views' parses and columns, nothing stored), samples per CPU-second, and the
bound it puts on the ratio: remote write / telnet per CPU-second could not exceed
decoding's rate / telnet's even if everything else a request costs (HTTP, the ref cache,
the log, the head) were free.

``--baseline REF`` starts a second tsd from git revision REF's tree (bench/ingest.py's
``export``: its C helpers built) and adds its remote write at each size, for this tree's
figure against that commit's in the same rounds.

Rounds alternate (tsd remote write at each size, tsd telnet, VictoriaMetrics at each
size, the baseline's remote write at each size), each round starting one further
(bench/ingest.py's ``rotated``); each figure is the median over rounds.

``--steady SECONDS`` measures in steady state, without VictoriaMetrics: this tree's remote
write, this tree's telnet on the same points and, with ``--baseline REF``, REF's remote
write. A fresh daemon of each side in turn (``--rounds`` times, the first side rotating)
is warmed with every series, then takes, on ``--connections`` connections for SECONDS,
the first ``--per-request`` size's requests (the same bodies, cycled) or the same points'
telnet lines (each connection's share, pass after pass, then ``version``). Its CPU (/proc)
from the start to the last reply is divided by the samples acknowledged (the lines sent,
all taken once ``version`` answers). The fixed-count rounds above are a second or two of
daemon CPU each, and their spread between rounds is often wider than a change of a tenth;
this keeps each side busy for as long as asked. It prints remote write / telnet per
CPU-second (issue 30's ratio) from the two steady medians.

Run: ``python -m bench.remote_write [--points N] [--series S] [--rounds R] [--floor]
[--connections C] [--per-request K[,K...]] [--no-vm] [--baseline REF] [--steady SECONDS]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import cramjam

from bench.ingest import (
    Mode,
    Server,
    Tsd,
    chunks_per_connection,
    export,
    modes,
    rotated,
    send_telnet,
    settle_disk,
    start_tsd,
    start_vm,
    tree_cpu_seconds,
)
from tsd.protocol.prom_labels import LabelMapper, MappedSeries
from tsd.protocol.prom_wire import TimeSeries, WriteRequest, decode_write_columns

#: the first sample's time (ms): an hour back, in the open hours of the head
BASE_MS = (int(time.time()) - 3600) * 1000
METRIC = "node_cpu_seconds_total"
#: scenario names (followed by the request size)
RW = "tsd remote write"
VM_RW = "VM remote write"
BEFORE_RW = "baseline remote write"
TELNET = "tsd telnet"
#: issue 30: remote write's samples per daemon CPU-second at least this share of telnet's
GOAL_RATIO = 0.5
#: who sends requests of this many samples when ``max_samples_per_send`` is left alone
SENDER_DEFAULTS = {
    500: "the default of Debian's Prometheus 2.42",
    2000: "the default of Prometheus since 2.44 and of Grafana Alloy",
}
_VM_RW_ROWS = re.compile(rb'^vm_rows_inserted_total\{type="promremotewrite"\} (\d+)', re.M)


def series_labels(series: int) -> list[list[tuple[str, str]]]:
    return [
        [
            ("__name__", METRIC),
            ("cpu", str(s % 8)),
            ("instance", f"host{s // 8}:9100"),
            ("job", "node"),
            ("mode", "user"),
        ]
        for s in range(series)
    ]


def samples(count: int, offset: int, series: int) -> list[tuple[int, int, float]]:
    """(series, timestamp ms, value): point i of series i % series, one second apart."""
    return [
        (i % series, BASE_MS + ((offset + i) // series) * 1000, float(i) + 0.5)
        for i in range(count)
    ]


def write_bodies(
    points: list[tuple[int, int, float]], labels: list[list[tuple[str, str]]], per_request: int
) -> list[bytes]:
    """Remote write requests as Prometheus builds them (a series per sample)."""
    encoded = []
    for s in labels:
        full = TimeSeries()
        for name, text in s:
            full.labels.add(name=name, value=text)
        encoded.append(full.SerializeToString())
    bodies = []
    for start in range(0, len(points), per_request):
        request = WriteRequest()
        for index, timestamp, value in points[start : start + per_request]:
            one = request.timeseries.add()
            one.MergeFromString(encoded[index])
            one.samples.add(timestamp=timestamp, value=value)
        bodies.append(bytes(cramjam.snappy.compress_raw(request.SerializeToString())))
    return bodies


def telnet_lines(
    points: list[tuple[int, int, float]], labels: list[list[tuple[str, str]]]
) -> list[bytes]:
    """The same points as telnet puts of the series remote write stores."""
    mapper = LabelMapper(max_tags=8)
    words = []
    for s in labels:
        mapped = mapper.map_series(s)
        assert isinstance(mapped, MappedSeries)
        tags = " ".join(f"{k}={v}" for k, v in mapped.tags)
        words.append(f"put {mapped.metric} %d %r {tags}\n")
    return [(words[index] % (timestamp, value)).encode() for index, timestamp, value in points]


async def post_all(
    session: aiohttp.ClientSession, url: str, bodies: list[bytes], acked: list[float]
) -> None:
    headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
    for body in bodies:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status // 100 != 2:
                raise RuntimeError(f"{url} answered {response.status}: {await response.text()}")
    acked.append(time.perf_counter())


async def timed(
    server: Server,
    send: list[Callable[[list[float]], Awaitable[None]]],
    end: Callable[[], Awaitable[None]],
    points: int,
) -> tuple[float, float]:
    """(samples per wall second, samples per CPU-second of the server)."""
    acked: list[float] = []
    cpu_start = tree_cpu_seconds(server.process.pid)
    start = time.perf_counter()
    await asyncio.gather(*(one(acked) for one in send))
    await end()
    wall = time.perf_counter() - start
    cpu = max(tree_cpu_seconds(server.process.pid) - cpu_start, 1e-3)
    return points / wall, points / cpu


async def vm_rows(session: aiohttp.ClientSession, server: Server) -> int:
    async with session.get(f"http://127.0.0.1:{server.http_port}/metrics") as response:
        return sum(int(m) for m in _VM_RW_ROWS.findall(await response.read()))


async def measure(args: argparse.Namespace, mode: Mode) -> dict[str, list[tuple[float, float]]]:
    os.sched_setaffinity(0, mode.generator_cpus)
    labels = series_labels(args.series)
    conns = args.connections
    found: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tsd = await start_tsd(Path(tmp) / "tsd", mode)
        vm = None if args.no_vm else await start_vm(Path(tmp) / "vm", mode)
        before = None
        if args.baseline:
            tree = export(args.baseline, Path(tmp) / "baseline")
            before = await start_tsd(Path(tmp) / "tsd-before", mode, source=tree)
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=conns)
            ) as session:
                tsd_url = f"http://127.0.0.1:{tsd.port}/api/v1/write"
                offset = 0

                def split(bodies: list[bytes]) -> list[list[bytes]]:
                    return [bodies[n::conns] for n in range(conns)]

                # warm-up: every series once, on each server
                warm = samples(args.series, offset, args.series)
                offset += args.series
                first = args.per_request[0]
                await post_all(session, tsd_url, write_bodies(warm, labels, first), [])
                chunks = chunks_per_connection(telnet_lines(warm, labels), 1)[0]
                await send_telnet(tsd, chunks, [])
                if vm is not None:
                    vm_url = f"http://127.0.0.1:{vm.http_port}/api/v1/write"
                    await post_all(session, vm_url, write_bodies(warm, labels, first), [])
                if before is not None:
                    before_url = f"http://127.0.0.1:{before.port}/api/v1/write"
                    await post_all(session, before_url, write_bodies(warm, labels, first), [])
                scenarios = [f"{RW} {size}" for size in args.per_request] + [TELNET]
                if vm is not None:
                    scenarios += [f"{VM_RW} {size}" for size in args.per_request]
                if before is not None:
                    scenarios += [f"{BEFORE_RW} {size}" for size in args.per_request]
                for number in range(args.rounds):
                    for name in rotated(scenarios, number):
                        points = samples(args.points, offset, args.series)
                        offset += args.points
                        if name == TELNET:
                            per = chunks_per_connection(telnet_lines(points, labels), conns)
                            rate = await timed(
                                tsd,
                                [functools.partial(send_telnet, tsd, c) for c in per],
                                lambda: tsd.end_round(session),
                                args.points,
                            )
                        else:
                            server: Server = {"tsd": tsd, "VM": vm, "baseline": before}[  # type: ignore[assignment]
                                name.split(" ", 1)[0]
                            ]
                            url = f"http://127.0.0.1:{server.http_port}/api/v1/write"
                            size = int(name.rsplit(" ", 1)[1])
                            parts = split(write_bodies(points, labels, size))

                            async def end(server: Server = server) -> None:
                                if isinstance(server, Tsd):
                                    await server.end_round(session)

                            rate = await timed(
                                server,
                                [functools.partial(post_all, session, url, p) for p in parts],
                                end,
                                args.points,
                            )
                        found.setdefault(name, []).append(rate)
                        print(
                            f"  round {number + 1} {name}: {rate[0]:,.0f}/s wall,"
                            f" {rate[1]:,.0f} per CPU-s",
                            flush=True,
                        )
                        settle_disk()
                await check_counts(session, tsd, vm, args, offset)
        finally:
            await tsd.stop()
            if vm is not None:
                await vm.stop()
            if before is not None:
                await before.stop()
    return found


async def post_until(
    session: aiohttp.ClientSession, url: str, bodies: list[bytes], stop_at: float
) -> int:
    """Post ``bodies`` in a cycle, one at a time, until ``stop_at``; how many were taken."""
    posted = 0
    while time.perf_counter() < stop_at:
        await post_all(session, url, [bodies[posted % len(bodies)]], [])
        posted += 1
    return posted


async def telnet_until(server: Tsd, chunks: list[bytes], lines: int, stop_at: float) -> int:
    """A connection's ``chunks`` (``lines`` lines in all) sent pass after pass until
    ``stop_at``, then ``version``: the lines sent, all taken once it answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    sent = 0
    while time.perf_counter() < stop_at:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        sent += lines
    await server.end_telnet(reader, writer)
    return sent


async def steady(args: argparse.Namespace, mode: Mode) -> dict[str, list[float]]:
    """Per side (this tree's remote write, this tree's telnet on the same points, and
    ``--baseline``'s remote write when given), the daemon's CPU nanoseconds a sample in
    each of ``--rounds`` steady runs of ``--steady`` seconds (see the module's docstring)."""
    os.sched_setaffinity(0, mode.generator_cpus)
    labels = series_labels(args.series)
    size, conns = args.per_request[0], args.connections
    points = samples(args.points, args.series, args.series)
    bodies = write_bodies(points, labels, size)
    warm_points = samples(args.series, 0, args.series)
    warm = write_bodies(warm_points, labels, size)
    warm_lines = chunks_per_connection(telnet_lines(warm_points, labels), 1)[0]
    lines = telnet_lines(points, labels)
    per_connection = chunks_per_connection(lines, conns)
    lines_of = [len(lines[n::conns]) for n in range(conns)]
    found: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {RW: None, TELNET: None}
        if args.baseline:
            trees[BEFORE_RW] = export(args.baseline, Path(tmp) / "baseline")
        for number in range(args.rounds):
            for name in rotated(list(trees), number):
                data = Path(tempfile.mkdtemp(dir=tmp))
                server = await start_tsd(data / "data", mode, source=trees[name])
                try:
                    async with aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(limit=conns)
                    ) as session:
                        url = f"http://127.0.0.1:{server.port}/api/v1/write"
                        if name == TELNET:
                            await send_telnet(server, warm_lines, [])
                        else:
                            await post_all(session, url, warm, [])
                        stop_at = time.perf_counter() + args.steady
                        cpu_start = tree_cpu_seconds(server.process.pid)
                        if name == TELNET:
                            sent = sum(
                                await asyncio.gather(
                                    *(
                                        telnet_until(server, chunks, lines_of[n], stop_at)
                                        for n, chunks in enumerate(per_connection)
                                    )
                                )
                            )
                        else:
                            posted = await asyncio.gather(
                                *(
                                    post_until(session, url, bodies[n::conns], stop_at)
                                    for n in range(conns)
                                )
                            )
                            sent = sum(posted) * size
                        cpu = tree_cpu_seconds(server.process.pid) - cpu_start
                finally:
                    await server.stop()
                    shutil.rmtree(data, ignore_errors=True)
                found.setdefault(name, []).append(cpu / sent * 1e9)
                print(
                    f"  round {number + 1} {name}: {sent:,} samples,"
                    f" {cpu / sent * 1e9:,.0f} ns of daemon CPU a sample",
                    flush=True,
                )
                settle_disk()
    return found


def decode_rate(points: int, series: int, size: int, repeats: int = 5) -> float:
    """Samples per CPU-second of :func:`decode_write_columns` alone over ``points`` samples
    in ``size``-sample bodies (the median of ``repeats``), in this process."""
    bodies = write_bodies(samples(points, 0, series), series_labels(series), size)
    limit = 1 << 30
    rates = []
    for _ in range(repeats):
        start = time.process_time()
        for body in bodies:
            decode_write_columns(body, limit)
        rates.append(points / (time.process_time() - start))
    return statistics.median(rates)


async def check_counts(
    session: aiohttp.ClientSession, tsd: Tsd, vm: Server | None, args: argparse.Namespace, sent: int
) -> None:
    """Outside the clock: every sample reached each server."""
    stats = await tsd.stats(session)
    rw = stats.get("tsd.ingest.points", 0)
    if stats.get("tsd.datapoints.stored", 0) < stats.get("tsd.datapoints.added", 0):
        raise RuntimeError(f"tsd stored fewer points than it added: {stats}")
    print(f"  tsd: {stats.get('tsd.datapoints.added', 0):,} points added, {rw:,} ingest.points")
    if vm is not None:
        vm_sent = args.series + args.points * args.rounds * len(args.per_request)
        with contextlib.suppress(Exception):
            await asyncio.sleep(2)
        print(f"  VM: {await vm_rows(session, vm):,} rows inserted of {vm_sent:,} sent")


def goal_line(ratio: float) -> str:
    """Remote write / telnet per CPU-second, and whether it meets issue 30's goal."""
    verdict = "met" if ratio >= GOAL_RATIO else "not met"
    return f"{ratio:.2f} (goal >= {GOAL_RATIO:g}: {verdict})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--series", type=int, default=2_000)
    parser.add_argument(
        "--per-request",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[500, 2000],
        help="samples a request, comma-separated; the first is the headline (500: Prometheus'"
        " default max_samples_per_send)",
    )
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="shared", help="pinned or shared (bench/ingest.py)")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure the protobuf runtime's decoding alone and the bound it sets",
    )
    parser.add_argument(
        "--baseline",
        default="",
        help="a git revision whose tsd (its tree, C helpers built) takes the same remote write"
        " rounds beside this tree's",
    )
    parser.add_argument(
        "--steady",
        type=float,
        default=0.0,
        help="seconds: steady remote write against telnet (and --baseline's remote write),"
        " each side's daemon busy that long",
    )
    args = parser.parse_args()
    mode = modes()[args.mode]
    if args.steady:
        size = args.per_request[0]
        print(f"mode {mode.name}: {mode.describe()}; {size:,} samples a request, steady")
        runs = asyncio.run(steady(args, mode))
        ours, telnet = statistics.median(runs[RW]), statistics.median(runs[TELNET])
        ratio = telnet / ours
        print(
            f"  median ns of daemon CPU a sample: remote write {ours:,.0f}, telnet {telnet:,.0f};"
            f" remote write / telnet per CPU-second {goal_line(ratio)}"
        )
        if args.baseline:
            theirs = statistics.median(runs[BEFORE_RW])
            print(
                f"  {args.baseline}'s remote write {theirs:,.0f}; this tree / {args.baseline}"
                f" {ours / theirs:.2f}"
            )
        return
    print(f"mode {mode.name}: {mode.describe()}; VM GOMAXPROCS={mode.vm_procs}")
    sizes = ", ".join(f"{size:,}" for size in args.per_request)
    print(f"{args.points:,} samples a round, {args.series:,} series, {sizes} samples a request")
    found = asyncio.run(measure(args, mode))
    cpu = {name: statistics.median(r[1] for r in rates) for name, rates in found.items()}
    wall = {name: statistics.median(r[0] for r in rates) for name, rates in found.items()}
    print("median of rounds: samples/s wall | samples per CPU-second of the server")
    for name in found:
        print(f"  {name:22} {wall[name]:12,.0f} {cpu[name]:12,.0f}")
    for number, size in enumerate(args.per_request):
        rw = f"{RW} {size}"
        notes = [n for n in (SENDER_DEFAULTS.get(size), "the headline" * (number == 0)) if n]
        headline = f" ({', '.join(notes)})" if notes else ""
        ratio = cpu[rw] / cpu[TELNET]
        print(f"  {size:,} samples a request{headline}:")
        print(f"    remote write / telnet per CPU-second: {goal_line(ratio)}")
        vm = f"{VM_RW} {size}"
        if vm in cpu:
            print(
                f"    tsd / VictoriaMetrics remote write per CPU-second: {cpu[rw] / cpu[vm]:.2f};"
                f" wall {wall[rw] / wall[vm]:.2f}"
            )
        old = f"{BEFORE_RW} {size}"
        if old in cpu:
            print(f"    this tree / {args.baseline} per CPU-second: {cpu[rw] / cpu[old]:.2f}")
        if args.floor:
            rate = decode_rate(args.points, args.series, size)
            print(
                f"    decoding alone (snappy + protobuf runtime): {rate:,.0f} samples per"
                f" CPU-second, {1e9 / rate:,.0f} ns a sample; telnet's whole path"
                f" {1e9 / cpu[TELNET]:,.0f} ns a point; so remote write / telnet"
                f" <= {rate / cpu[TELNET]:.2f} with everything else free"
            )


if __name__ == "__main__":
    main()
