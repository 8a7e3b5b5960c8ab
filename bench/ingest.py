"""Ingest throughput of the running daemon: telnet lines/s and /api/put points/s.

tsd runs as ``tsdb tsd`` in a subprocess on the embedded store, pinned to CPU 0 (taskset)
when the machine has two CPUs or more; this load generator pins itself to CPU 1. Every
scenario sends pre-built bytes as fast as the server takes them and ends when the
server's counter of accepted points reaches the total (tsd ``/api/stats``
``tsd.datapoints.added``; VictoriaMetrics ``vm_rows_inserted_total``). Scenarios:

* telnet, steady state: the series were sent once before (UIDs and row keys cached);
* telnet, cold: every point starts a new series (a new tag value: a UID assignment);
* /api/put with 1,000-point bodies and with 50-point bodies, steady state.

Each rate is given per wall-clock second and per second of the server process's own CPU
time (/proc utime + stime), which a machine shared with other work disturbs less; tsd and
VictoriaMetrics runs alternate (``--repeat``, best kept) so both see the same load.

Baselines measured in the same run: VictoriaMetrics (Debian's ``victoria-metrics``, its
OpenTSDB listener, GOMAXPROCS=1 on the same CPU) when installed, with the same generator;
and ``Storage.put`` of the same cells pre-encoded, in process (the storage's own ceiling).

With ``--baseline-src DIR`` (a directory holding another checkout's ``tsd`` package, e.g.
``git archive main tsd | tar -x -C DIR``) that tsd runs too, alternating with this one,
and the ratios this/baseline are printed: how a change moves ingest, in one run.

Run: ``python -m bench.ingest [--points N] [--connections C] [--repeat R] [--no-vm]
[--baseline-src DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from tsd.codec import KeyLayout, encode_point, make_series_key
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage

BASE_TS = int(time.time()) - 7200  # two hours back: stays in open and closed hours alike
#: issue 3 item 11: points/s with the daemon on one core (a shared machine shows it best as
#: points per CPU-second of the daemon; the wall-clock rate is printed beside it)
GOALS = {"telnet steady": 250_000, "/api/put 1000/body": 250_000}
CHUNK = 64 * 1024


# -- the servers ------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: asyncio.subprocess.Process
    port: int
    count: Callable[[aiohttp.ClientSession], Awaitable[int]]

    async def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        await self.process.wait()


def pin(cpu: int) -> list[str]:
    """A taskset prefix when there are two CPUs to spread over."""
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu)]
    return []


async def start_tsd(data_dir: Path, source: Path | None = None) -> Server:
    """tsd from this checkout, or from the ``tsd`` package under ``source``."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    process = await asyncio.create_subprocess_exec(
        *pin(0),
        sys.executable,
        "-m",
        "tsd",
        "tsd",
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--auto-metric",
        "--data-dir",
        str(data_dir),
        "--set",
        "tsd.logging.format=json",
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=source,  # python -m puts the working directory first on sys.path
    )
    assert process.stderr is not None
    while line := await process.stderr.readline():
        event = json.loads(line)
        if event.get("event") == "daemon.started":
            port = int(event["port"])
            asyncio.ensure_future(process.stderr.read())  # keep draining its log
            return Server("tsd", process, port, functools.partial(tsd_added, port=port))
    raise RuntimeError("tsd did not start")


async def tsd_added(session: aiohttp.ClientSession, port: int) -> int:
    async with session.get(f"http://127.0.0.1:{port}/api/stats") as response:
        records = orjson.loads(await response.read())
    return sum(int(r["value"]) for r in records if r["metric"] == "tsd.datapoints.added")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_vm(data_dir: Path) -> Server | None:
    binary = shutil.which("victoria-metrics")
    if binary is None:
        return None
    http_port, tsdb_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        *pin(0),
        binary,
        f"-storageDataPath={data_dir}",
        f"-httpListenAddr=127.0.0.1:{http_port}",
        f"-opentsdbListenAddr=127.0.0.1:{tsdb_port}",
        "-loggerLevel=ERROR",
        env={**os.environ, "GOMAXPROCS": "1"},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            with contextlib.suppress(aiohttp.ClientError):
                await vm_rows(session, http_port)
                return Server(
                    "victoria-metrics", process, tsdb_port, lambda s: vm_rows(s, http_port)
                )
            await asyncio.sleep(0.05)
    raise RuntimeError("victoria-metrics did not start")


_VM_ROWS = re.compile(rb'^vm_rows_inserted_total\{type="opentsdb(?:http)?"\} (\d+)', re.M)


async def vm_rows(session: aiohttp.ClientSession, port: int) -> int:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.read()
    return sum(int(m) for m in _VM_ROWS.findall(text))


# -- the load ---------------------------------------------------------------------------------


def telnet_lines(count: int, offset: int, series: int, prefix: str) -> list[bytes]:
    """``count`` put lines; point i goes to series ``i % series`` (all new when series=count)."""
    return [
        b"put %s.cpu %d %d host=%s%d dc=lga cpu=%d\n"
        % (prefix.encode(), BASE_TS + (offset + i) // series, i, prefix.encode(), i % series, i % 8)
        for i in range(count)
    ]


def json_bodies(count: int, per_body: int, offset: int, series: int) -> list[bytes]:
    bodies = []
    for start in range(0, count, per_body):
        points = [
            {
                "metric": "http.cpu",
                "timestamp": BASE_TS + (offset + i) // series,
                "value": i if i % 2 else i + 0.5,
                "tags": {"host": f"h{i % series}", "dc": "lga", "cpu": str(i % 8)},
            }
            for i in range(start, min(count, start + per_body))
        ]
        bodies.append(orjson.dumps(points))
    return bodies


def chunks_per_connection(lines: list[bytes], connections: int) -> list[list[bytes]]:
    per: list[list[bytes]] = [[] for _ in range(connections)]
    for n in range(connections):
        data = b"".join(lines[n::connections])
        per[n] = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    return per


async def send_telnet(port: int, chunks: list[bytes]) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def send_http(session: aiohttp.ClientSession, port: int, bodies: list[bytes]) -> None:
    for body in bodies:
        async with session.post(f"http://127.0.0.1:{port}/api/put", data=body) as response:
            if response.status not in (200, 204):
                raise RuntimeError(f"/api/put answered {response.status}: {await response.text()}")


async def wait_count(server: Server, session: aiohttp.ClientSession, target: int) -> None:
    """Poll the server's counter (it has no way to tell us; 20 ms adds little to seconds)."""
    for _ in range(100_000):
        if await server.count(session) >= target:
            return
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{server.name} never counted {target} points")


@dataclass(frozen=True)
class Rate:
    """Points per wall-clock second, and per second of the server's own CPU time (the
    latter is less disturbed when other work shares the machine)."""

    wall: float
    cpu: float

    def best(self, other: Rate | None) -> Rate:
        if other is None:
            return self
        return Rate(max(self.wall, other.wall), max(self.cpu, other.cpu))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(
    server: Server,
    session: aiohttp.ClientSession,
    expected: int,
    senders: Sequence[Awaitable[None]],
) -> Rate:
    """From the first byte sent until the server counted every point."""
    first = await server.count(session)
    cpu_start = cpu_seconds(server.process.pid)
    start = time.perf_counter()
    await asyncio.gather(*senders)
    await wait_count(server, session, expected)
    wall = time.perf_counter() - start
    cpu = max(cpu_seconds(server.process.pid) - cpu_start, 1e-3)
    return Rate((expected - first) / wall, (expected - first) / cpu)


# -- scenarios --------------------------------------------------------------------------------


async def run_scenarios(server: Server, args: argparse.Namespace) -> dict[str, Rate]:
    rates: dict[str, Rate] = {}
    n, conns, series = args.points, args.connections, args.series
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conns)) as session:
        total = await server.count(session)

        async def telnet(name: str, lines: list[bytes]) -> None:
            nonlocal total
            per = chunks_per_connection(lines, conns)
            total += len(lines)
            rate = await timed(server, session, total, [send_telnet(server.port, c) for c in per])
            rates[name] = rate

        async def http(name: str, bodies: list[bytes], points: int) -> None:
            nonlocal total
            total += points
            senders = [send_http(session, server.port, bodies[i::conns]) for i in range(conns)]
            rates[name] = await timed(server, session, total, senders)

        await telnet("warm-up", telnet_lines(series, 0, series, "tel"))
        await telnet("telnet steady", telnet_lines(n, series, series, "tel"))
        await telnet("telnet cold", telnet_lines(args.cold_points, 0, args.cold_points, "cold"))
        warm = json_bodies(series, 1000, 0, series)
        await http("warm-up http", warm, series)
        await http("/api/put 1000/body", json_bodies(n, 1000, series, series), n)
        await http("/api/put 50/body", json_bodies(n // 4, 50, series + n, series), n // 4)
    rates.pop("warm-up", None)
    rates.pop("warm-up http", None)
    return rates


def storage_baseline(data_dir: Path, points: int, series: int) -> float:
    """Cells/s of ``EmbeddedStorage.put`` with the cells already encoded, in 50k batches."""
    layout = KeyLayout()
    keys = [
        make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", i.to_bytes(3, "big"))])
        for i in range(series)
    ]
    puts = []
    for i in range(points):
        base, qualifier, value = encode_point(BASE_TS + i // series, i)
        puts.append(Put(keys[i % series].row_key(base), "t", qualifier, value))
    puts.sort(key=lambda p: (p.row, p.qualifier))

    async def run() -> float:
        storage = EmbeddedStorage(data_dir)
        from tsd.storage.base import FamilySpec

        await storage.create_table("tsdb", [FamilySpec("t")])
        start = time.perf_counter()
        for i in range(0, len(puts), 50_000):
            await storage.put("tsdb", puts[i : i + 50_000])
        elapsed = time.perf_counter() - start
        await storage.close()
        return points / elapsed

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--cold-points", type=int, default=20_000)
    parser.add_argument("--series", type=int, default=1_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="runs per server, best kept")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument(
        "--baseline-src", type=Path, help="also run the tsd package under this directory"
    )
    args = parser.parse_args()
    if pin(1):
        os.sched_setaffinity(0, {1})

    async def one_run(start: Callable[[Path], Awaitable[Server | None]]) -> dict[str, Rate] | None:
        with tempfile.TemporaryDirectory() as tmp:
            server = await start(Path(tmp) / "data")
            if server is None:
                return None
            try:
                return await run_scenarios(server, args)
            finally:
                await server.stop()

    async def measure() -> tuple[dict[str, Rate], dict[str, Rate], dict[str, Rate]]:
        best: dict[str, dict[str, Rate]] = {"tsd": {}, "vm": {}, "base": {}}
        servers: list[tuple[str, Callable[[Path], Awaitable[Server | None]]]] = [("tsd", start_tsd)]
        if args.baseline_src is not None:
            servers.append(("base", functools.partial(start_tsd, source=args.baseline_src)))
        if not args.no_vm:
            servers.append(("vm", start_vm))
        for _ in range(args.repeat):  # alternate, so that both see the same machine load
            for name, start in servers:
                rates = await one_run(start)
                for scenario, rate in (rates or {}).items():
                    best[name][scenario] = rate.best(best[name].get(scenario))
        return best["tsd"], best["vm"], best["base"]

    tsd_rates, vm_rates, base_rates = asyncio.run(measure())
    with tempfile.TemporaryDirectory() as tmp:
        put_rate = storage_baseline(Path(tmp) / "s", args.points, args.series)
    cpus = "daemon on CPU 0, generator on CPU 1" if pin(1) else "no pinning (one CPU)"
    shape = f"{args.points:,} points, {args.series:,} series, {args.connections} connections"
    print(f"ingest: {shape}; {cpus}; best of {args.repeat}")
    print("  points/s (wall clock) | points per CPU-second of the server")
    header = f"  {'scenario':20} {'tsd':>10} {'tsd/cpu':>10}"
    if vm_rates:
        header += f" {'VM':>10} {'VM/cpu':>10} {'tsd/VM':>7} {'cpu ratio':>9}"
    print(header)
    for name, rate in tsd_rates.items():
        row = f"  {name:20} {rate.wall:10,.0f} {rate.cpu:10,.0f}"
        if vm_rates:
            vm = vm_rates[name]
            row += f" {vm.wall:10,.0f} {vm.cpu:10,.0f} {rate.wall / vm.wall:7.2f}"
            row += f" {rate.cpu / vm.cpu:9.2f}"
        print(row)
    if base_rates:
        print(f"  against the baseline tsd ({args.baseline_src}), this/baseline:")
        for name, rate in tsd_rates.items():
            base = base_rates[name]
            print(
                f"    {name:20} wall {rate.wall / base.wall:5.2f}  per CPU-second"
                f" {rate.cpu / base.cpu:5.2f}  (baseline {base.wall:,.0f} wall,"
                f" {base.cpu:,.0f}/cpu)"
            )
    print(f"  Storage.put of pre-encoded cells, in process: {put_rate:,.0f} cells/s")
    print(f"  telnet steady / Storage.put: {tsd_rates['telnet steady'].wall / put_rate:.2f}")
    for scenario, goal in GOALS.items():
        rate = tsd_rates[scenario]
        verdict = "met" if max(rate.wall, rate.cpu) >= goal else "not met"
        print(
            f"  goal {scenario}: {goal:,} points/s on one core -> {rate.wall:,.0f} wall,"
            f" {rate.cpu:,.0f} per CPU-second: {verdict}"
        )


if __name__ == "__main__":
    main()
