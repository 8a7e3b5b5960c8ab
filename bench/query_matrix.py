"""The shapes a dashboard sends, tsd against VictoriaMetrics over HTTP, on the same points.

bench/query.py measures one shape (``sum:1m-avg`` over a day); this is its matrix (issue
27). Four metrics are loaded into both servers through their telnet listeners, the same
lines, the way bench/query loads (bench.query.send_telnet: VictoriaMetrics then
``/internal/force_flush``; tsd then ``version`` per connection and one ``/api/put?sync``):

* ``bench.cpu``: ``--series`` (default 1,000) random walks x ``--hours`` (24) at
  ``--step`` (10 s);
* ``bench.ctr``: as many counters (increasing walks) over the same hours;
* ``bench.wide``: ``--wide`` (10,000) random walks x ``--wide-hours`` (2) at 60 s;
* ``bench.panel``: ``--panel-series`` (100) random walks x ``--panel-days`` (30) at 60 s.

Every series is tagged ``host=h%05d``. The shapes (tsd's ``m=`` / the MetricsQL asked of
VictoriaMetrics' ``/api/v1/query_range``, ``nocache=1``):

==========  =====================================  ==============================================
raw         ``none:bench.cpu{host=h00000}``        ``bench.cpu{host="h00000"}`` step ``--step``
sum-1m      ``sum:1m-avg:bench.cpu``               ``sum(avg_over_time(bench.cpu[1m]))``
sum-1h      ``sum:1h-avg:bench.cpu``               ``sum(avg_over_time(bench.cpu[1h]))``
groupby     ``sum:5m-avg:bench.wide{host=*}``      ``sum by (host) (avg_over_time(...[5m]))``
rate        ``sum:rate:1m-avg:bench.ctr``          ``sum((avg_over_time(x[1m]) - avg_over_time(x[1m]
                                                   offset 1m)) / 60)``: OpenTSDB's rate of the
                                                   downsampled series, exactly
filter      ``sum:1m-avg:bench.wide{host=a|b|c}``  ``sum by (host) (avg_over_time(bench.wide{host=~
                                                   "a|b|c"}[1m]))``: 3 series of ``--wide``
panel30d    ``sum:1h-avg:bench.panel`` (30 days)   ``sum(avg_over_time(bench.panel[1h]))``
burst       the ten queries of a dashboard at once (raw of two series, sum-1m, sum-1h, rate,
            groupby, three filters, panel30d), each on its own connection: their wall time
==========  =====================================  ==============================================

MetricsQL's window alignment is bench/query's: tsd's bucket ``[m, m+w)`` is labelled m;
``avg_over_time(x[w])`` at t averages ``(t-w, t]``, so VictoriaMetrics is asked at
t = m + w - 1 and its stamps are shifted back by w - 1. **Every answer is checked** (the
warm-up round, before anything is timed) against numpy's computation over the generated
arrays, the same stamps and values within rtol 1e-9, per group (``host`` or none).

Two phases, as bench/query: **fresh** (rows in tsd's head: the daemon runs with
``tsd.storage.head.grace`` = 1 day and a head big enough for every row, so the rounds read
the head; ``tsd.head.rows`` is printed before and after) and **written out** (tsd stopped,
which writes every row out with its rollups, and started again; the rounds wait until its
head is empty: a daemon stopped before its head was all written out replays its log). Per
phase a warm-up round, then ``--rounds`` (>= 7) rounds, each asking every shape of tsd and
VictoriaMetrics, which server goes first alternating from round to round; per shape the
p50 of the wall time and the mean of the server's own CPU time per query (/proc, all
threads: 10 ms ticks, so the mean over the rounds, not a median of ticks) and their ratios.
With ``--baseline REV`` tsd from git revision REV (bench.ingest.export) is loaded and asked
too, in the same rounds: the ratio before and after a change, one run.

Each round also asks each server a trivial request (``floor``: tsd's ``/api/version``,
VictoriaMetrics' ``/api/v1/status/buildinfo``), reported on a line of its own after the
shapes and left out of the goal. The shapes are asked one after another, each server after
the other's answer, so every request meets caches another process has just used: on this
project's VM a small query then costs about twice its CPU time back to back (bench.query_ab
measures both spacings), and the floor line shows how much of a small shape's time (raw,
filter: a few ms) any request pays there, the bench's own Python client included. What a
small shape meets also depends on the shape asked before it: with ``--shapes
raw,sum-1m,filter,rate`` (the filter after ``sum-1m``) VictoriaMetrics' filter p50 was
1.0-1.1 ms and tsd's 2.1-2.2 ms, where in whole-matrix runs (the filter after ``rate``)
VictoriaMetrics' took 1.3 to 4.4 ms and tsd's 2.0 to 2.8 ms.

Under each shape's line, its *paired* figure: the median of every round's own tsd /
VictoriaMetrics ratio, and in how many rounds tsd was the faster. A round asks both
servers within milliseconds, so its ratio leaves out this machine's speed, which moves by
a quarter from one stretch of seconds to the next and with it both medians; the goal
stays the ratio of the medians.

Only the metrics the asked shapes read are loaded (``--shapes groupby`` loads
``bench.wide`` alone).

Run: ``python -m bench.query_matrix [--series N] [--hours H] [--step S] [--wide N]
[--wide-hours H] [--panel-series N] [--panel-days D] [--rounds N] [--shapes a,b]
[--baseline REV] [--walls]``; ``--scale F`` multiplies every series count (a quick run:
0.1); ``--walls`` prints every timed wall in round order before each phase's report.
``TSD_BENCH_PORTS=LOW-HIGH`` keeps every server's ports in that range (bench.ingest).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import numpy.typing as npt
import orjson

from bench.ingest import Server, cpu_seconds, export, modes, start_tsd, start_vm
from bench.query import (
    BASE,
    _none,
    head_rows,
    make_values,
    running,
    same_points,
    send_telnet,
)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
#: per group label (the ``host`` tag, "" for an aggregate of all): stamps (s), values
Answer = dict[str, tuple[Ints, Floats]]

#: issue 27: tsd p50 / VictoriaMetrics p50 per shape, fresh and written out
GOAL_RATIO = 1.0
#: issue 27: the 30-day panel from tsd's own rollups, p50 ms
GOAL_PANEL_MS = 50.0
#: the fresh phase keeps every row in the head for its whole length
FRESH_SETTINGS = {
    "tsd.storage.head.grace": "86400",
    "tsd.storage.head.max_bytes": str(8 << 30),
}
#: a query's limits wide enough for the raw side of every shape
TSD_SETTINGS = {"tsd.query.timeout": "600000"}
BURST = (
    "raw", "raw2", "sum-1m", "sum-1h", "rate", "groupby", "filter", "filter2", "filter3",
    "panel30d",
)  # fmt: skip
#: the line after the shapes: a trivial request of each server in every round (tsd's
#: ``/api/version``, VictoriaMetrics' ``/api/v1/status/buildinfo``), asked like a shape and
#: reported beside them, not one of them (no goal): the least any answer above costs over
#: HTTP, caches as cold as the shapes' (see the module's docstring)
FLOOR = "floor"
#: the dataset each shape reads: only those of the asked shapes are loaded
SHAPE_DATA = {
    "raw": "cpu", "raw2": "cpu", "sum-1m": "cpu", "sum-1h": "cpu", "rate": "ctr",
    "groupby": "wide", "filter": "wide", "filter2": "wide", "filter3": "wide",
    "panel30d": "panel",
}  # fmt: skip


# -- the data ---------------------------------------------------------------------------------


@dataclass
class Dataset:
    """A metric's generated points: ``values[s, i]`` of host h%05d at BASE + i * step."""

    metric: str
    values: Floats
    step: int

    @property
    def hosts(self) -> list[str]:
        return [f"h{s:05d}" for s in range(self.values.shape[0])]

    def chunks(self, connections: int) -> list[list[bytes]]:
        """bench.query.telnet_chunks' order (series s on connection s % connections, hour
        after hour) for this metric."""
        n_series, n_points = self.values.shape
        per_hour = 3600 // self.step
        stamps = [b"%d" % t for t in (BASE + np.arange(n_points) * self.step).tolist()]
        head = b"put " + self.metric.encode() + b" "
        out: list[list[bytes]] = [[] for _ in range(connections)]
        for hour in range(n_points // per_hour):
            lo, hi = hour * per_hour, (hour + 1) * per_hour
            for c in range(connections):
                lines: list[bytes] = []
                for s in range(c, n_series, connections):
                    tail = b" host=h%05d\n" % s
                    row = self.values[s, lo:hi].tolist()
                    lines.extend(
                        head + t + b" %.2f" % v + tail
                        for t, v in zip(stamps[lo:hi], row, strict=True)
                    )
                out[c].append(b"".join(lines))
        return out


def counters(n_series: int, n_points: int, seed: int = 5) -> Floats:
    """Increasing two-decimal walks (no resets: OpenTSDB's plain rate is their slope)."""
    rng = np.random.default_rng(seed)
    steps = np.round(rng.uniform(0, 10, size=(n_series, n_points)), 2)
    return np.asarray(np.round(1000 + np.cumsum(steps, axis=1), 2), dtype=np.float64)


def datasets(args: argparse.Namespace) -> dict[str, Dataset]:
    per_hour = 3600 // args.step
    n = max(1, round(args.series * args.scale))
    wide = max(3, round(args.wide * args.scale))
    panel = max(1, round(args.panel_series * args.scale))
    return {
        "cpu": Dataset("bench.cpu", make_values(n, args.hours * per_hour), args.step),
        "ctr": Dataset("bench.ctr", counters(n, args.hours * per_hour), args.step),
        "wide": Dataset("bench.wide", make_values(wide, args.wide_hours * 60, seed=7), 60),
        "panel": Dataset("bench.panel", make_values(panel, args.panel_days * 24 * 60, seed=11), 60),
    }


# -- the shapes -------------------------------------------------------------------------------


def buckets(values: Floats, per_bucket: int) -> Floats:
    """Each series' bucket averages."""
    return np.asarray(values.reshape(values.shape[0], -1, per_bucket).mean(axis=2))


@dataclass
class Shape:
    """One query of both servers and the answer both must give."""

    name: str
    tsd_m: str
    vm_query: str
    start: int
    end: int
    step: int
    #: VictoriaMetrics is asked at bucket start + shift
    shift: int
    want: Answer

    def tsd_params(self) -> dict[str, str]:
        return {"start": str(self.start), "end": str(self.end), "m": self.tsd_m}

    def vm_params(self) -> dict[str, str]:
        return {
            "query": self.vm_query,
            "start": str(self.start + self.shift),
            "end": str(self.end),
            "step": str(self.step),
            "nocache": "1",
        }


def _sum_shape(name: str, data: Dataset, width: int) -> Shape:
    """``sum:<width>-avg`` over every series of ``data``."""
    span = data.values.shape[1] * data.step
    sums = buckets(data.values, width // data.step).sum(axis=0)
    stamps = BASE + width * np.arange(sums.size, dtype=np.int64)
    label = f"{width // 60}m" if width < 3600 else f"{width // 3600}h"
    return Shape(
        name,
        f"sum:{label}-avg:{data.metric}",
        f"sum(avg_over_time({_vm_metric(data.metric)}[{width}s]))",
        BASE,
        BASE + span - 1,
        width,
        width - 1,
        {"": (stamps, sums)},
    )


def _vm_metric(metric: str) -> str:
    # VictoriaMetrics keeps the OpenTSDB name with its dots; a selector names it this way
    return '{__name__="' + metric + '"}'


def _vm_selector(metric: str, matcher: str) -> str:
    return '{__name__="' + metric + '",' + matcher + "}"


def shapes(data: dict[str, Dataset]) -> dict[str, Shape]:
    cpu, ctr, wide, panel = data["cpu"], data["ctr"], data["wide"], data["panel"]
    span = cpu.values.shape[1] * cpu.step
    out: dict[str, Shape] = {}
    for name, s in (("raw", 0), ("raw2", 1 % cpu.values.shape[0])):
        host = cpu.hosts[s]
        stamps = BASE + cpu.step * np.arange(cpu.values.shape[1], dtype=np.int64)
        out[name] = Shape(
            name,
            f"none:{cpu.metric}{{host={host}}}",
            _vm_selector(cpu.metric, f'host="{host}"'),
            BASE,
            BASE + span - 1,
            cpu.step,
            0,
            {host: (stamps, cpu.values[s].copy())},
        )
    out["sum-1m"] = _sum_shape("sum-1m", cpu, 60)
    out["sum-1h"] = _sum_shape("sum-1h", cpu, 3600)
    per_host = buckets(wide.values, 300 // wide.step)
    stamps = BASE + 300 * np.arange(per_host.shape[1], dtype=np.int64)
    wide_span = wide.values.shape[1] * wide.step
    out["groupby"] = Shape(
        "groupby",
        f"sum:5m-avg:{wide.metric}{{host=*}}",
        f"sum by (host) (avg_over_time({_vm_metric(wide.metric)}[300s]))",
        BASE,
        BASE + wide_span - 1,
        300,
        299,
        {h: (stamps, per_host[s]) for s, h in enumerate(wide.hosts)},
    )
    minutes = buckets(ctr.values, 60 // ctr.step)
    rates = (np.diff(minutes, axis=1) / 60).sum(axis=0)
    x = _vm_metric(ctr.metric)
    out["rate"] = Shape(
        "rate",
        f"sum:rate:1m-avg:{ctr.metric}",
        f"sum((avg_over_time({x}[60s]) - avg_over_time({x}[60s] offset 60s)) / 60)",
        BASE,
        BASE + span - 1,
        60,
        59,
        {"": (BASE + 60 + 60 * np.arange(rates.size, dtype=np.int64), rates)},
    )
    n_wide = wide.values.shape[0]
    minutes = buckets(wide.values, 60 // wide.step)
    stamps = BASE + 60 * np.arange(minutes.shape[1], dtype=np.int64)
    for name, first in (("filter", 1), ("filter2", n_wide // 2), ("filter3", n_wide - 3)):
        rows = [(first + k) % n_wide for k in range(3)]
        hosts = [wide.hosts[r] for r in rows]
        matcher = 'host=~"' + "|".join(hosts) + '"'
        out[name] = Shape(
            name,
            f"sum:1m-avg:{wide.metric}{{host={'|'.join(hosts)}}}",
            f"sum by (host) (avg_over_time({_vm_selector(wide.metric, matcher)}[60s]))",
            BASE,
            BASE + wide_span - 1,
            60,
            59,
            {h: (stamps, minutes[r]) for h, r in zip(hosts, rows, strict=True)},
        )
    out["panel30d"] = _sum_shape("panel30d", panel, 3600)
    return out


# -- answers ----------------------------------------------------------------------------------


def tsd_answer(body: bytes) -> Answer:
    out: Answer = {}
    for series in orjson.loads(body):
        dps = series["dps"]
        key = series["tags"].get("host", "")
        out[key] = (
            np.fromiter((int(t) for t in dps), np.int64, len(dps)),
            np.fromiter(dps.values(), np.float64, len(dps)),
        )
    return out


def vm_answer(body: bytes, shift: int) -> Answer:
    out: Answer = {}
    for series in orjson.loads(body)["data"]["result"]:
        pairs = series["values"]
        key = series["metric"].get("host", "")
        out[key] = (
            np.fromiter((int(t) - shift for t, _ in pairs), np.int64, len(pairs)),
            np.fromiter((float(v) for _, v in pairs), np.float64, len(pairs)),
        )
    return out


def check(who: str, shape: Shape, got: Answer) -> None:
    """``got`` is ``shape.want``: the same groups, stamps and values (rtol 1e-9)."""
    if set(got) != set(shape.want):
        missing = sorted(set(shape.want) - set(got))[:3]
        extra = sorted(set(got) - set(shape.want))[:3]
        raise RuntimeError(
            f"{who} {shape.name}: {len(got)} groups, want {len(shape.want)} "
            f"(missing {missing}, extra {extra})"
        )
    for key, (stamps, values) in shape.want.items():
        same_points(f"{who} {shape.name} {key!r}", *got[key], stamps, values)


# -- asking -----------------------------------------------------------------------------------


@dataclass
class Side:
    """A server to ask: its URL, how it reads a shape, and its timings per shape."""

    name: str
    server: Server
    walls: dict[str, list[float]] = field(default_factory=dict)
    cpus: dict[str, list[float]] = field(default_factory=dict)

    @property
    def is_vm(self) -> bool:
        return self.name == "victoria-metrics"

    def request(self, shape: Shape) -> tuple[str, dict[str, str]]:
        base = f"http://127.0.0.1:{self.server.http_port}"
        if self.is_vm:
            return f"{base}/api/v1/query_range", shape.vm_params()
        return f"{base}/api/query", shape.tsd_params()

    def parse(self, shape: Shape, body: bytes) -> Answer:
        return vm_answer(body, shape.shift) if self.is_vm else tsd_answer(body)

    def floor_url(self) -> str:
        """A trivial request of this server (``FLOOR``)."""
        base = f"http://127.0.0.1:{self.server.http_port}"
        return f"{base}/api/v1/status/buildinfo" if self.is_vm else f"{base}/api/version"

    async def get(
        self, session: aiohttp.ClientSession, url: str, params: dict[str, str], what: str
    ) -> bytes:
        """The body of a 200 answer to ``url``; RuntimeError naming ``what`` otherwise."""
        async with session.get(url, params=params) as reply:
            body = await reply.read()
            if reply.status != 200:
                raise RuntimeError(f"{self.name} {what}: {reply.status} {body[:300]!r}")
            return body

    async def ask(self, session: aiohttp.ClientSession, shape: Shape) -> bytes:
        url, params = self.request(shape)
        return await self.get(session, url, params, shape.name)

    async def ask_floor(self, session: aiohttp.ClientSession) -> bytes:
        return await self.get(session, self.floor_url(), {}, FLOOR)

    def record(self, name: str, wall: float, cpu: float) -> None:
        self.walls.setdefault(name, []).append(wall)
        self.cpus.setdefault(name, []).append(cpu)

    async def timed(self, name: str, asked: Awaitable[bytes]) -> None:
        """``asked``'s wall time and the server's CPU meanwhile, recorded as ``name``."""
        pid = self.server.process.pid
        c0, w0 = cpu_seconds(pid), time.perf_counter()
        await asked
        self.record(name, time.perf_counter() - w0, cpu_seconds(pid) - c0)

    async def burst(self, sessions: list[aiohttp.ClientSession], todo: list[Shape]) -> list[bytes]:
        """Every shape of ``todo`` at once, one connection each; timed as one."""
        pid = self.server.process.pid
        c0, w0 = cpu_seconds(pid), time.perf_counter()
        bodies = await asyncio.gather(
            *(self.ask(session, shape) for session, shape in zip(sessions, todo, strict=True))
        )
        self.record("burst", time.perf_counter() - w0, cpu_seconds(pid) - c0)
        return list(bodies)


@contextlib.asynccontextmanager
async def sessions(count: int) -> AsyncIterator[list[aiohttp.ClientSession]]:
    """``count`` clients of one keep-alive connection each."""
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for _ in range(count):
            connector = aiohttp.TCPConnector(limit_per_host=1)
            session = aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20)
            out.append(await stack.enter_async_context(session))
        yield out


async def run_rounds(
    sides: list[Side], todo: list[Shape], burst: list[Shape], n_rounds: int
) -> None:
    """Warm-up (every answer checked), then rounds: per shape every side, the first side
    rotating from round to round; the burst last in each round."""
    async with sessions(max(1, len(burst))) as clients:
        session = clients[0]
        for side in sides:
            await side.ask_floor(session)
            for shape in todo:
                check(side.name, shape, side.parse(shape, await side.ask(session, shape)))
            if burst:
                for shape, body in zip(burst, await side.burst(clients, burst), strict=True):
                    check(side.name, shape, side.parse(shape, body))
                side.walls.clear()
                side.cpus.clear()
        for r in range(n_rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for shape in todo:
                for side in order:
                    await side.timed(shape.name, side.ask(session, shape))
            for side in order:
                await side.timed(FLOOR, side.ask_floor(session))
            for side in order if burst else ():
                await side.burst(clients, burst)


def print_walls(sides: list[Side], names: list[str]) -> None:
    """Every timed wall (ms) per shape and side, in round order (``--walls``): round r
    asks the side ``r % sides`` first, so an order effect shows as every other value."""
    for name in names:
        for side in sides:
            if name in side.walls:
                walls = " ".join(f"{wall * 1000:.1f}" for wall in side.walls[name])
                print(f"    {name:<9} {side.name}: {walls}")


def report(phase: str, sides: list[Side], names: list[str]) -> dict[str, float]:
    """One line per shape: each side's p50 wall and CPU ms, tsd / VictoriaMetrics."""
    vm = next((s for s in sides if s.is_vm), None)
    ratios: dict[str, float] = {}
    print(
        f"  {phase}: p50 ms wall (mean server CPU ms: /proc's 10 ms ticks over the rounds); "
        "tsd / victoria-metrics wall (cpu)"
    )
    for name in names:
        line = f"    {name:<9}"
        base = None
        if vm is not None and name in vm.walls:
            base = statistics.median(vm.walls[name]), statistics.fmean(vm.cpus[name])
        for side in sides:
            if name not in side.walls:
                continue
            wall, cpu = statistics.median(side.walls[name]), statistics.fmean(side.cpus[name])
            line += f"  {side.name} {wall * 1000:7.1f} ({cpu * 1000:6.1f})"
            if base is not None and not side.is_vm:
                ratio = wall / base[0]
                cpu_ratio = f"{cpu / base[1]:5.2f}x" if base[1] else "  n/a"
                line += f" = {ratio:5.2f}x ({cpu_ratio})"
                if side is sides[0]:
                    ratios[name] = ratio
        print(line, flush=True)
        if vm is not None and name in vm.walls and name in sides[0].walls:
            per_round, faster = paired(sides[0].walls[name], vm.walls[name])
            rounds = len(vm.walls[name])
            print(
                f"    {'':<9}  paired: {per_round:.2f}x (median of the rounds' own ratios),"
                f" tsd faster in {faster} of {rounds} rounds",
                flush=True,
            )
    return ratios


def paired(tsd_walls: list[float], vm_walls: list[float]) -> tuple[float, int]:
    """(the median of each round's tsd / VictoriaMetrics wall, the rounds tsd was
    faster in): the module docstring's paired figure."""
    rounds = list(zip(tsd_walls, vm_walls, strict=True))
    return statistics.median(t / v for t, v in rounds), sum(t < v for t, v in rounds)


# -- the run ----------------------------------------------------------------------------------


async def load(server: Server, chunks: dict[str, list[list[bytes]]]) -> str:
    parts = []
    for name, per_connection in chunks.items():
        parts.append(f"{name} {await send_telnet(server, per_connection):.1f} s")
    return ", ".join(parts)


async def main(args: argparse.Namespace) -> None:
    if args.rounds < 7:
        raise SystemExit("--rounds: at least 7")
    mode = modes()["shared"]
    data = datasets(args)
    every = shapes(data)
    names = [n for n in args.shapes.split(",") if n] if args.shapes else [
        "raw", "sum-1m", "sum-1h", "groupby", "rate", "filter", "panel30d", "burst",
    ]  # fmt: skip
    unknown = set(names) - set(every) - {"burst"}
    if unknown:
        raise SystemExit(f"--shapes: no shape {sorted(unknown)} (known: {sorted(every)})")
    todo = [every[n] for n in names if n != "burst"]
    burst = [every[n] for n in BURST] if "burst" in names else []
    needed = {SHAPE_DATA[s.name] for s in todo + burst}
    data = {name: d for name, d in data.items() if name in needed}
    points = sum(d.values.size for d in data.values())
    print(
        "datasets: "
        + "; ".join(
            f"{d.metric} {d.values.shape[0]:,} x {d.values.shape[1]:,} at {d.step} s"
            for d in data.values()
        )
        + f" = {points:,} points; {args.rounds} rounds",
        flush=True,
    )
    t0 = time.perf_counter()
    chunks = {name: d.chunks(args.connections) for name, d in data.items()}
    print(f"  lines built in {time.perf_counter() - t0:.1f} s", flush=True)
    fresh = {**TSD_SETTINGS, **FRESH_SETTINGS}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tsd-matrix-")))
        baseline = export(args.baseline, tmp / "rev") if args.baseline else None
        vm_start: Awaitable[Server | None] = (
            _none() if args.no_vm else start_vm(tmp / "vm", mode, "-retentionPeriod=100y")
        )
        async with running(vm_start) as vm:
            if vm is not None:
                print(f"  load victoria-metrics: {await load(vm, chunks)}", flush=True)
            await phase("fresh", args, tmp, mode, vm, baseline, chunks, todo, burst, names, fresh)
            await phase(
                "written out", args, tmp, mode, vm, baseline, None, todo, burst, names,
                TSD_SETTINGS,
            )  # fmt: skip


async def phase(
    label: str,
    args: argparse.Namespace,
    tmp: Path,
    mode: Any,
    vm: Server | None,
    baseline: Path | None,
    chunks: dict[str, list[list[bytes]]] | None,
    todo: list[Shape],
    burst: list[Shape],
    names: list[str],
    settings: dict[str, str],
) -> None:
    """One phase: tsd (and the baseline) loaded with ``chunks`` (fresh) or restarted on
    what they wrote out, then the rounds."""

    def start(data: Path, source: Path | None) -> Awaitable[Server]:
        return start_tsd(data, mode, source=source, settings=settings)

    before = _none() if baseline is None else start(tmp / "tsd-rev", baseline)
    async with running(start(tmp / "tsd", None)) as tsd, running(before) as rev:
        assert tsd is not None
        sides = [Side("tsd", tsd)]
        if rev is not None:
            sides.append(Side(f"tsd {args.baseline}", rev))
        if chunks is not None:
            for side in sides:
                print(f"  load {side.name}: {await load(side.server, chunks)}", flush=True)
        if vm is not None:
            sides.append(Side("victoria-metrics", vm))
        if chunks is None:  # written out: what a restart replayed from its log goes first
            for side in sides[: 2 if rev is not None else 1]:
                waited = await head_empty(side.server)
                print(f"  {side.name}: head empty after {waited:.0f} s", flush=True)
        rows = await head_rows(tsd)
        await run_rounds(sides, todo, burst, args.rounds)
        after = await head_rows(tsd)
        print(f"\n{label}: tsd.head.rows {rows:,} before the rounds, {after:,} after")
        if args.walls:
            print_walls(sides, [*names, FLOOR])
        ratios = report(label, sides, [*names, FLOOR])
        ratios.pop(FLOOR, None)  # not a shape: what each answer above costs at least
        if ratios:
            worst = max(ratios.values())
            goal = "ok" if worst <= GOAL_RATIO else "NOT MET"
            print(f"  worst tsd / victoria-metrics {worst:.2f}x (goal <= {GOAL_RATIO:g}x: {goal})")
        if "panel30d" in sides[0].walls:
            p50 = statistics.median(sides[0].walls["panel30d"]) * 1000
            goal = "ok" if p50 <= GOAL_PANEL_MS else "NOT MET"
            print(f"  panel30d tsd p50 {p50:.1f} ms (goal <= {GOAL_PANEL_MS:g} ms: {goal})")


async def head_empty(server: Server, limit_s: float = 1800) -> float:
    """Wait until tsd's head holds no row (a daemon stopped before its head was written
    out replays its log into the head, then writes it out after the grace); seconds."""
    t0 = time.perf_counter()
    while await head_rows(server):
        if time.perf_counter() - t0 > limit_s:
            raise RuntimeError(f"{server.name}: rows still in the head after {limit_s:g} s")
        await asyncio.sleep(2)
    return time.perf_counter() - t0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000, help="bench.cpu and bench.ctr")
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--step", type=int, default=10, help="bench.cpu's and bench.ctr's")
    parser.add_argument("--wide", type=int, default=10_000, help="bench.wide's series")
    parser.add_argument("--wide-hours", type=int, default=2)
    parser.add_argument("--panel-series", type=int, default=100)
    parser.add_argument("--panel-days", type=int, default=30)
    parser.add_argument("--scale", type=float, default=1.0, help="times every series count")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (>= 7)")
    parser.add_argument("--shapes", default="", help="comma-separated (default: all)")
    parser.add_argument("--connections", type=int, default=4, help="telnet connections to load")
    parser.add_argument("--no-vm", action="store_true", help="skip VictoriaMetrics")
    parser.add_argument("--baseline", help="git revision: its tsd joins the rounds")
    parser.add_argument("--walls", action="store_true", help="print every round's walls")
    args = parser.parse_args(argv)
    if 3600 % args.step or 60 % args.step:
        parser.error("--step: a divisor of 60")
    return args


def run(argv: list[str] | None = None) -> None:
    asyncio.run(main(parse_args(argv)))


if __name__ == "__main__":
    run()
