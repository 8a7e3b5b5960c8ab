"""Query latency over HTTP: tsd's ``sum:1m-avg`` over a day of data against VictoriaMetrics'
equivalent MetricsQL query, both real server processes, same points, same run.

Per ``--steps`` (default 10 and 60 s between points), a day of ``--series`` series (default
1,000: 8.64 M points at 10 s) of a %.2f random walk (fixed seed):

* **servers**: tsd as ``tsdb tsd --auto-metric`` (as scripts/tsd starts it) in a
  subprocess on a fresh embedded data directory, every setting at its default (the
  write-ahead log on, the head on; only ``--bind 127.0.0.1 --port 0`` and JSON log lines,
  to learn its port); VictoriaMetrics (Debian's ``victoria-metrics``) with
  its OpenTSDB listener (``-retentionPeriod=100y``: the data is from 2013). Both may use both CPUs.
* **loading**: the same telnet ``put`` lines to both, hour after hour (every series' hour,
  then the next hour), over ``--connections`` connections (a series always on the same
  one). VictoriaMetrics first: each connection half-closes (``shutdown(SHUT_WR)``) after
  its last line and is done when the server closes it (VictoriaMetrics closes a telnet
  connection once every row of it is added), then ``/internal/force_flush`` makes them
  searchable. tsd second, and queried at once: each connection sends ``version`` after its
  last put and waits for the reply (every earlier line handled), then one point to
  ``/api/put?sync`` (its batch, the last, is logged and in the head). So the fresh query
  reads what a dashboard or a backfill reads: rows still in the head (their hour closed
  long ago, so each leaves ``tsd.storage.head.grace`` after its last point; the run prints
  ``tsd.head.rows`` before and after the rounds, the sync point's row included).
* **queries**: tsd ``GET /api/query?start=S&end=S+86399&m=sum:1m-avg:bench.cpu``;
  VictoriaMetrics ``GET /api/v1/query_range`` of
  ``sum(avg_over_time({__name__="bench.cpu"}[1m]))`` from S+59 to S+86399, step 60,
  ``nocache=1`` (result cache off). Same client (aiohttp, one keep-alive connection
  each), whole body read. A warm-up round, then ``--rounds`` (default 9, at least 5)
  rounds alternating tsd, VictoriaMetrics; p50 of each and the ratio; also the server's
  own CPU time per query (/proc, all threads), the steadier figure on a shared machine.
* **the answers are checked equal** (warm-up round) before anything is timed, so a fast
  wrong answer cannot pass: same 1,440 buckets, tsd's sums equal VictoriaMetrics' within
  rtol 1e-9, and both equal numpy's computation over the generated arrays. Semantics
  aligned: tsd's 1m-avg bucket ``[m, m+60)`` averages the points at m, m+10, ..., m+50
  and is labelled m; MetricsQL's ``avg_over_time(x[1m])`` at t averages the points in
  ``(t-60, t]``, so it is evaluated at t = m+59 (``nocache=1`` keeps that start:
  VictoriaMetrics aligns start to the step only for cached queries) and compared with
  bucket m. Every series has every bucket, so
  tsd's ``sum`` interpolates nothing and both sums are the plain sum of the per-series
  averages (in another order: hence the tolerance).
* **after compaction**: tsd is stopped (SIGTERM writes every head row out as one compacted
  cell) and started again on the same directory (its head empty), and queried the same
  way beside the same VictoriaMetrics. With ``--baseline REV``, tsd from git revision REV
  (a clean export, its C helpers built) is started on a copy of that directory and joins
  the rounds (tsd, VictoriaMetrics, REV): the compacted query against the commit before.

With ``--size``: the data directory's bytes per point (allocated blocks, every file: store
and log) after 1,000 series x 6 hours at 10 s (2.16 M points) went through the daemon the
same way and it was stopped (issue 9: <= 25).

Run: ``python -m bench.query [--series N] [--steps 10,60] [--rounds N] [--connections C]
[--no-vm] [--size] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import numpy.typing as npt
import orjson

from bench.ingest import Server, Tsd, cpu_seconds, export, modes, start_tsd, start_vm

BASE = 1356998400  # 2013-01-01 00:00:00 UTC
DAY = 86400
METRIC = "bench.cpu"
VM_METRIC = '{__name__="bench.cpu"}'  # VictoriaMetrics keeps the OpenTSDB metric name
BUCKETS = DAY // 60
RTOL = 1e-9
#: issue 9: tsd p50 / VictoriaMetrics p50, fresh and after compaction
GOAL_RATIO = 3.0
#: issue 9: the data directory's bytes per point after 2.16 M points
GOAL_BYTES_PER_POINT = 25.0


def make_values(n_series: int, n_points: int, seed: int = 3) -> npt.NDArray[np.float64]:
    """Random walks with two decimals: realistic doubles (8-byte values)."""
    rng = np.random.default_rng(seed)
    steps = np.round(rng.normal(0, 1, size=(n_series, n_points)), 2)
    return np.asarray(np.round(50 + np.cumsum(steps, axis=1), 2), dtype=np.float64)


def reference(values: npt.NDArray[np.float64], step: int) -> npt.NDArray[np.float64]:
    """sum across series of the 1-minute averages, numpy only."""
    per_minute = 60 // step
    minutes = values.reshape(values.shape[0], -1, per_minute).mean(axis=2)
    return np.asarray(minutes.sum(axis=0), dtype=np.float64)


def telnet_chunks(
    values: npt.NDArray[np.float64], step: int, connections: int
) -> list[list[bytes]]:
    """Per connection, per hour: the put lines of its series (series s on connection
    s % connections) for that hour, series after series. ``%.2f`` prints the two-decimal
    values exactly (each is the double nearest k/100, which is what parsing k/100 gives)."""
    n_series, n_points = values.shape
    per_hour = 3600 // step
    stamps = [b"%d" % t for t in (BASE + np.arange(n_points) * step).tolist()]
    texts = [[b"%.2f" % v for v in row] for row in values.tolist()]
    chunks: list[list[bytes]] = [[] for _ in range(connections)]
    for hour in range(n_points // per_hour):
        span = range(hour * per_hour, (hour + 1) * per_hour)
        for c in range(connections):
            lines: list[bytes] = []
            for s in range(c, n_series, connections):
                tail = b" host=h%05d\n" % s
                row = texts[s]
                lines.extend(b"put bench.cpu " + stamps[i] + b" " + row[i] + tail for i in span)
            chunks[c].append(b"".join(lines))
    return chunks


async def send_telnet(server: Server, chunks: list[list[bytes]]) -> float:
    """Every connection's chunks, then the server's end-of-connection handshake (bench.ingest:
    half-close for VictoriaMetrics, ``version`` for tsd); then the end of the round (tsd:
    ``/api/put?sync``); seconds taken."""
    t0 = time.perf_counter()

    async def one(parts: list[bytes]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for part in parts:
            writer.write(part)
            await writer.drain()
        await server.end_telnet(reader, writer)

    await asyncio.gather(*(one(parts) for parts in chunks))
    async with aiohttp.ClientSession() as session:
        await server.end_round(session)
        if not isinstance(server, Tsd):
            async with session.get(f"http://127.0.0.1:{server.http_port}/internal/force_flush"):
                pass
    return time.perf_counter() - t0


# -- the queries ------------------------------------------------------------------------------


@dataclass
class Target:
    """A server to query: how to ask, and how to read its answer as (bucket starts, sums)."""

    name: str
    server: Server
    url: str
    params: dict[str, str]
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def answer(self, body: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        raise NotImplementedError

    async def ask(self, session: aiohttp.ClientSession) -> bytes:
        async with session.get(self.url, params=self.params) as reply:
            body = await reply.read()
            if reply.status != 200:
                raise RuntimeError(f"{self.name} answered {reply.status}: {body[:300]!r}")
            return body

    async def timed(self, session: aiohttp.ClientSession) -> None:
        pid = self.server.process.pid
        c0, w0 = cpu_seconds(pid), time.perf_counter()
        await self.ask(session)
        self.walls.append(time.perf_counter() - w0)
        self.cpus.append(cpu_seconds(pid) - c0)

    def p50(self) -> tuple[float, float]:
        return statistics.median(self.walls), statistics.median(self.cpus)


class TsdTarget(Target):
    def answer(self, body: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        results = orjson.loads(body)
        if len(results) != 1:
            raise RuntimeError(f"{self.name}: {len(results)} series, expected 1")
        dps = results[0]["dps"]
        return (
            np.array([int(t) for t in dps], dtype=np.int64),
            np.array(list(dps.values()), dtype=np.float64),
        )


class VmTarget(Target):
    def answer(self, body: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        results = orjson.loads(body)["data"]["result"]
        if len(results) != 1:
            raise RuntimeError(f"{self.name}: {len(results)} series, expected 1")
        pairs = results[0]["values"]
        # evaluated at m + 59: the window (m - 1, m + 59] is tsd's bucket [m, m + 60)
        return (
            np.array([int(t) - 59 for t, _ in pairs], dtype=np.int64),
            np.array([float(v) for _, v in pairs], dtype=np.float64),
        )


def tsd_target(name: str, server: Server) -> Target:
    params = {"start": str(BASE), "end": str(BASE + DAY - 1), "m": f"sum:1m-avg:{METRIC}"}
    return TsdTarget(name, server, f"http://127.0.0.1:{server.http_port}/api/query", params)


def vm_target(server: Server) -> Target:
    params = {
        "query": f"sum(avg_over_time({VM_METRIC}[1m]))",
        "start": str(BASE + 59),
        "end": str(BASE + DAY - 1),
        "step": "60",
        "nocache": "1",
    }
    url = f"http://127.0.0.1:{server.http_port}/api/v1/query_range"
    return VmTarget("victoria-metrics", server, url, params)


def same_points(
    who: str,
    stamps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    want_stamps: npt.NDArray[np.int64],
    want: npt.NDArray[np.float64],
) -> None:
    """The same stamps and values within RTOL, or a RuntimeError naming the first difference."""
    if not np.array_equal(stamps, want_stamps):
        raise RuntimeError(
            f"{who}: {len(stamps)} stamps {stamps[:3].tolist()}..., expected "
            f"{len(want_stamps)} {want_stamps[:3].tolist()}..."
        )
    if not np.allclose(values, want, rtol=RTOL, atol=0):
        bad = int(np.flatnonzero(~np.isclose(values, want, rtol=RTOL, atol=0))[0])
        raise RuntimeError(f"{who}: at {stamps[bad]} {values[bad]!r}, want {want[bad]!r}")


def check(target: Target, body: bytes, want: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The answer has the day's 1,440 minute buckets and numpy's sums; its sums."""
    stamps, sums = target.answer(body)
    expected = BASE + 60 * np.arange(BUCKETS, dtype=np.int64)
    same_points(target.name, stamps, sums, expected, want)
    return sums


async def rounds(targets: list[Target], n_rounds: int, want: npt.NDArray[np.float64]) -> None:
    """A warm-up round checking every answer, then ``n_rounds`` alternating rounds."""
    connector = aiohttp.TCPConnector(limit_per_host=1)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=1 << 20) as session:
        answers = [check(target, await target.ask(session), want) for target in targets]
        for target, sums in zip(targets[1:], answers[1:], strict=True):
            if not np.allclose(sums, answers[0], rtol=RTOL, atol=0):
                raise RuntimeError(f"{target.name} and {targets[0].name} answer differently")
        for _ in range(n_rounds):
            for target in targets:
                await target.timed(session)


async def head_rows(server: Server) -> int:
    """tsd's ``tsd.head.rows`` gauge."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{server.http_port}/api/stats") as reply,
    ):
        records = orjson.loads(await reply.read())
    return sum(int(r["value"]) for r in records if r["metric"] == "tsd.head.rows")


def report(label: str, targets: list[Target]) -> dict[str, float]:
    """Print each target's p50s and the ratios to VictoriaMetrics'; the ratios by name."""
    figures = {t.name: t.p50() for t in targets}
    vm = figures.get("victoria-metrics")
    ratios = {}
    for t in targets:
        wall, cpu = figures[t.name]
        line = f"  {label:<10} {t.name:<18} p50 {wall * 1000:7.1f} ms"
        line += f" (server cpu {cpu * 1000:6.1f} ms)"
        if vm is not None and t.name != "victoria-metrics":
            ratios[t.name] = wall / vm[0]
            goal = "ok" if ratios[t.name] <= GOAL_RATIO else "NOT MET"
            cpu_ratio = cpu / max(vm[1], 1e-9)
            line += f"  tsd/vm {ratios[t.name]:5.2f}x (cpu {cpu_ratio:5.2f}x)"
            line += f"  goal <= {GOAL_RATIO:g}x: {goal}"
        print(line, flush=True)
    print(
        f"  {'':<10} rounds (ms): "
        + "; ".join(f"{t.name} {[round(w * 1000) for w in t.walls]}" for t in targets)
    )
    return ratios


# -- one step ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running(start: Awaitable[Server | None]) -> AsyncIterator[Server | None]:
    server = await start
    try:
        yield server
    finally:
        if server is not None:
            await server.stop()


async def measure_step(args: argparse.Namespace, step: int, baseline: Path | None) -> None:
    mode = modes()["shared"]
    values = make_values(args.series, DAY // step)
    want = reference(values, step)
    chunks = telnet_chunks(values, step, args.connections)
    points = values.size
    print(f"\n{args.series} series x 1 day at {step} s = {points:,} points; {METHOD}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tsd-bench-query-") as tmp:
        data = Path(tmp) / "tsd"
        vm_start = (
            start_vm(Path(tmp) / "vm", mode, "-retentionPeriod=100y") if not args.no_vm else _none()
        )
        async with running(vm_start) as vm:
            if vm is not None:
                print(f"  load victoria-metrics (telnet): {await send_telnet(vm, chunks):.1f} s")
            async with running(start_tsd(data, mode)) as tsd:
                assert tsd is not None
                print(f"  load tsd (telnet): {await send_telnet(tsd, chunks):.1f} s", flush=True)
                targets = [tsd_target("tsd", tsd)] + ([vm_target(vm)] if vm else [])
                before = await head_rows(tsd)
                await rounds(targets, args.rounds, want)
                after = await head_rows(tsd)
                rows = args.series * DAY // 3600
                print(f"  fresh: {before:,} of {rows:,} rows in the head before, {after:,} after")
                report("fresh", targets)
            # stopped: every row written out
            copy = Path(tmp) / "before"
            if baseline is not None:
                shutil.copytree(data, copy)
            async with (
                running(start_tsd(data, mode)) as tsd,
                running(
                    start_tsd(copy, mode, source=baseline) if baseline else _none()
                ) as before_tsd,
            ):
                assert tsd is not None
                targets = [tsd_target("tsd", tsd)] + ([vm_target(vm)] if vm else [])
                if before_tsd is not None:
                    targets.append(tsd_target(f"tsd {args.baseline}", before_tsd))
                if await head_rows(tsd):
                    raise RuntimeError("tsd restarted with rows in its head")
                await rounds(targets, args.rounds, want)
                report("compacted", targets)
                if before_tsd is not None:
                    now, then = targets[0].p50()[0], targets[-1].p50()[0]
                    print(f"  compacted: tsd / tsd {args.baseline} = {now / then:.2f}x")


async def _none() -> None:
    return None


METHOD = (
    "HTTP to both servers, warm-up round checked equal, then rounds alternating; "
    "p50 of wall time per query"
)


# -- size -------------------------------------------------------------------------------------


async def store_size(n_series: int) -> None:
    """The data directory after n_series x 6 h at 10 s went through the daemon (stopped)."""
    values = make_values(n_series, 6 * 360)
    with tempfile.TemporaryDirectory(prefix="tsd-bench-size-") as tmp:
        data = Path(tmp) / "tsd"
        async with running(start_tsd(data, modes()["shared"])) as tsd:
            assert tsd is not None
            await send_telnet(tsd, telnet_chunks(values, 10, 4))
        size = sum(p.stat().st_blocks * 512 for p in data.rglob("*") if p.is_file())
    per_point = size / values.size
    goal = "ok" if per_point <= GOAL_BYTES_PER_POINT else "NOT MET"
    print(
        f"\ndata directory after {values.size:,} points ({n_series} series x 6 h at 10 s) "
        f"through the daemon, stopped: {size / 1e6:.1f} MB, {per_point:.2f} B/point "
        f"(goal <= {GOAL_BYTES_PER_POINT:g}: {goal})"
    )


# -- the baseline -----------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    if args.rounds < 5:
        raise SystemExit("--rounds: at least 5")
    with tempfile.TemporaryDirectory(prefix="tsd-bench-rev-") as tmp:
        baseline = export(args.baseline, Path(tmp)) if args.baseline else None
        for step in (int(s) for s in args.steps.split(",") if s):
            await measure_step(args, step, baseline)
    if args.size:
        await store_size(1000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--steps", default="10,60", help="seconds between points, comma-separated")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds (>= 5)")
    parser.add_argument("--connections", type=int, default=4, help="telnet connections to load")
    parser.add_argument("--size", action="store_true", help="also bytes per point after 2.16 M")
    parser.add_argument("--no-vm", action="store_true", help="skip VictoriaMetrics")
    parser.add_argument("--baseline", help="git revision: its tsd joins the compacted rounds")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> None:
    asyncio.run(main(parse_args(argv)))


if __name__ == "__main__":
    run()
