"""What one small request costs, warm and after idleness: tsd against VictoriaMetrics.

Two things bench/query_matrix.py cannot tell apart (its rounds ask each server while the
other has been answering, so both answer cold), and bench/remote_write.py cannot either
(its rounds are many requests at once):

* **Latency, warm and after idleness.** On one keep-alive connection, each server is asked
  the trivial request (tsd's ``/api/version``, VictoriaMetrics' ``/health``) and the
  matrix's small shapes (``--shapes``, default ``filter,raw``: the same points loaded the
  same way, the same queries, every answer checked as the matrix checks it). A sample is
  a pair: the request asked twice back to back, the second timed (*warm*), then again
  after the client slept ``--idle-ms`` (*idle*). ``--pairs`` samples per request and
  server, the servers taking turns pair by pair; the p50 of each, and tsd /
  VictoriaMetrics.
* **tsd's CPU per request** (/proc: utime + stime of the daemon and its children), one
  request after another: ``/api/version``, a one-point ``/api/put``, remote write
  (``/api/v1/write``) of 1 and of 100 samples of series it knows (bench/remote_write.py's
  series and bodies, a first pass of them before the clock). ``--cpu-requests`` requests,
  three rounds, the median.

tsd runs with the matrix's fresh settings (the rows stay in its head).

Run: ``python -m bench.request_cost [--shapes filter,raw] [--pairs 40] [--idle-ms 50]
[--cpu-requests 2000] [--no-vm] [--scale F]`` (``TSD_BENCH_PORTS`` as bench/ingest.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson

from bench import query_matrix as qm
from bench import remote_write as rw
from bench.ingest import Server, modes, start_tsd, start_vm, tree_cpu_seconds
from bench.query import _none, running

#: one request of a side: its URL, its query parameters, and the check of its answer
Ask = tuple[str, dict[str, str], Callable[[bytes], None]]


def requests_of(side: qm.Side, shapes: list[qm.Shape]) -> dict[str, Ask]:
    """The requests ``side`` is timed on, by name: the trivial one, then each shape."""
    base = f"http://127.0.0.1:{side.server.http_port}"
    trivial = f"{base}/health" if side.is_vm else f"{base}/api/version"
    out: dict[str, Ask] = {"trivial": (trivial, {}, lambda body: None)}
    for shape in shapes:
        url, params = side.request(shape)

        def checked(body: bytes, shape: qm.Shape = shape) -> None:
            qm.check(side.name, shape, side.parse(shape, body))

        out[shape.name] = (url, params, checked)
    return out


async def fetch(session: aiohttp.ClientSession, ask: Ask) -> tuple[float, bytes]:
    """One request: its wall time and its body (a non-200 stops the bench)."""
    url, params, _ = ask
    started = time.perf_counter()
    async with session.get(url, params=params) as reply:
        body = await reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{url}: {reply.status} {body[:300]!r}")
    return time.perf_counter() - started, body


async def latencies(
    sides: list[qm.Side], shapes: list[qm.Shape], pairs: int, idle_s: float
) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """(side, request) -> (warm walls, walls after idleness)."""
    asks = {side.name: requests_of(side, shapes) for side in sides}
    out: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    async with aiohttp.ClientSession() as session:
        for side in sides:  # every answer checked before anything is timed
            for ask in asks[side.name].values():
                ask[2]((await fetch(session, ask))[1])
        for name in asks[sides[0].name]:
            for turn in range(pairs):
                for side in sides[turn % len(sides) :] + sides[: turn % len(sides)]:
                    ask = asks[side.name][name]
                    warm, idle = out.setdefault((side.name, name), ([], []))
                    await fetch(session, ask)
                    warm.append((await fetch(session, ask))[0])
                    await asyncio.sleep(idle_s)
                    idle.append((await fetch(session, ask))[0])
    return out


def report_latencies(
    sides: list[qm.Side],
    names: list[str],
    found: dict[tuple[str, str], tuple[list[float], list[float]]],
    idle_ms: float,
) -> None:
    print(f"p50 ms: warm (back to back) -> after {idle_ms:g} ms idle")
    vm = next((s for s in sides if s.is_vm), None)
    for name in names:
        line = f"  {name:<8}"
        for side in sides:
            warm, idle = (statistics.median(x) * 1000 for x in found[(side.name, name)])
            line += f"  {side.name} {warm:6.2f} -> {idle:6.2f}"
        if vm is not None:
            tsd_warm, tsd_idle = (statistics.median(x) for x in found[(sides[0].name, name)])
            vm_warm, vm_idle = (statistics.median(x) for x in found[(vm.name, name)])
            line += f"   tsd / vm: warm {tsd_warm / vm_warm:.2f}x, idle {tsd_idle / vm_idle:.2f}x"
        print(line, flush=True)


async def cpu_per_request(tsd: Server, count: int) -> dict[str, float]:
    """tsd's CPU (us) per request, one after another, for each kind of request."""
    base = f"http://127.0.0.1:{tsd.http_port}"
    labels = rw.series_labels(200)
    snappy = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf"}
    put = orjson.dumps([{"metric": "bench.put", "timestamp": 1_700_000_000, "value": 1.5,
                         "tags": {"host": "a"}}])  # fmt: skip
    kinds: dict[str, tuple[str, str, list[bytes], dict[str, str]]] = {
        "/api/version": ("GET", "/api/version", [b""], {}),
        "/api/put, 1 point": ("POST", "/api/put", [put], {}),
    }
    for size in (1, 100):
        # every body a new timestamp of known series: the first pass (outside the clock)
        # makes the series known, the timed rounds write newer points
        bodies = rw.write_bodies(rw.samples(size * count * 4, 0, 200), labels, size)
        kinds[f"remote write, {size}"] = ("POST", "/api/v1/write", bodies, snappy)
    out: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        for name, (method, path, bodies, headers) in kinds.items():
            cycle = len(bodies) > 1
            for i in range(min(200, count) if not cycle else count):
                body = bodies[i] if cycle else bodies[0]
                async with session.request(
                    method, base + path, data=body or None, headers=headers
                ) as r:
                    await r.read()
            rounds = []
            for k in range(3):
                started = tree_cpu_seconds(tsd.process.pid)
                for i in range(count):
                    body = bodies[(k + 1) * count + i] if cycle else bodies[0]
                    async with session.request(
                        method, base + path, data=body or None, headers=headers
                    ) as reply:
                        await reply.read()
                        if reply.status // 100 != 2:
                            raise RuntimeError(f"{path}: {reply.status}")
                rounds.append((tree_cpu_seconds(tsd.process.pid) - started) / count * 1e6)
            out[name] = statistics.median(rounds)
            print(f"  {name:<20} {out[name]:6.0f} us ({', '.join(f'{r:.0f}' for r in rounds)})",
                  flush=True)  # fmt: skip
    return out


async def main(args: argparse.Namespace) -> None:
    mode = modes()["shared"]
    names = [n for n in args.shapes.split(",") if n]
    matrix = qm.parse_args(["--shapes", args.shapes, "--scale", str(args.scale)])
    data = qm.datasets(matrix)
    every = qm.shapes(data)
    unknown = set(names) - set(every)
    if unknown:
        raise SystemExit(f"--shapes: no shape {sorted(unknown)} (known: {sorted(every)})")
    shapes = [every[n] for n in names]
    needed = {qm.SHAPE_DATA[n] for n in names}
    chunks = {name: d.chunks(matrix.connections) for name, d in data.items() if name in needed}
    settings = {**qm.TSD_SETTINGS, **qm.FRESH_SETTINGS}
    with tempfile.TemporaryDirectory(prefix="tsd-request-cost-") as tmp:
        vm_start: Awaitable[Server | None] = (
            _none() if args.no_vm else start_vm(Path(tmp) / "vm", mode, "-retentionPeriod=100y")
        )
        async with (
            running(vm_start) as vm,
            running(start_tsd(Path(tmp) / "tsd", mode, settings=settings)) as tsd,
        ):
            assert tsd is not None
            sides = [qm.Side("tsd", tsd)]
            if vm is not None:
                sides.append(qm.Side("victoria-metrics", vm))
            for side in sides:
                print(f"load {side.name}: {await qm.load(side.server, chunks)}", flush=True)
            found = await latencies(sides, shapes, args.pairs, args.idle_ms / 1000)
            report_latencies(sides, ["trivial", *names], found, args.idle_ms)
            print("tsd's CPU per request, one after another (median of 3 rounds)")
            await cpu_per_request(tsd, args.cpu_requests)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="filter,raw", help="the matrix's small shapes")
    parser.add_argument("--pairs", type=int, default=40, help="samples per request and server")
    parser.add_argument("--idle-ms", type=float, default=50.0)
    parser.add_argument("--cpu-requests", type=int, default=2000)
    parser.add_argument("--scale", type=float, default=1.0, help="bench.query_matrix's --scale")
    parser.add_argument("--no-vm", action="store_true", help="skip VictoriaMetrics")
    return parser.parse_args(argv)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parse_args()))
