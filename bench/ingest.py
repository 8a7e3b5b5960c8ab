"""Ingest throughput of the running daemon: telnet lines/s and /api/put points/s.

tsd runs as ``tsdb tsd`` in a subprocess on the embedded store; VictoriaMetrics (Debian's
``victoria-metrics``, its OpenTSDB listener: telnet and /api/put on one port) runs beside
it as the baseline, fed by the same generator with the same pre-built bytes. Two CPU
layouts (``--modes``):

* ``pinned``: the server on CPU 0 (VictoriaMetrics with GOMAXPROCS=1), this generator on
  CPU 1 (issue 3's one-core figures);
* ``shared``: the server and the generator both on CPUs 0-1 (VictoriaMetrics with
  GOMAXPROCS=2), as they would share a small machine (issue 11's acceptance).

Scenarios: telnet steady state (series sent before: UIDs and row keys cached), telnet
cold (every point starts a new series: a new tag value, a UID assignment), /api/put with
1,000-point and 50-point bodies, steady state.

When the clock stops (the method, printed with the figures):

* VictoriaMetrics, telnet: each connection half-closes (``shutdown(SHUT_WR)``) after its
  last line and the clock waits for the server to close it; VictoriaMetrics closes a
  telnet connection once it has parsed the whole stream and added every row to its
  storage (``vm_rows_inserted_total`` is not used for timing: /metrics is rebuilt at most
  once a second, which rounded every round up by up to a second).
* VictoriaMetrics, /api/put: the reply to the last body (sent after its rows are added).
* tsd, telnet: each connection sends ``version`` after its last put and waits for the
  reply, which tsd writes only after every earlier line of that connection is handled:
  parsed, its UIDs resolved or assigned, its cell in the writer's batch (where OpenTSDB
  acknowledges a put too: queued for HBase). Then one point to ``/api/put?sync``: its
  reply comes once the batch holding it is in storage, and the embedded store writes
  batches one at a time in order through one thread with a synced LMDB commit, so every
  point of the round is on disk (fsync) when the clock stops (on a store that writes
  batches concurrently, HBase, the clock also waits until ``tsd.datapoints.stored``
  reaches ``.added``). The time at the ``version``
  replies is reported as well ("acked").
* tsd, /api/put: the reply to the last body (points buffered), then the same ``sync``
  point.

The servers' own counters (tsd ``tsd.datapoints.added`` and ``.stored``; VictoriaMetrics
``vm_rows_inserted_total``) are read after the clock stopped, as a check that every point
arrived. Rounds alternate tsd, VictoriaMetrics, tsd, ... (``--rounds``) so that both
see the same machine, each round starting with the next server (every server follows
every other as often), and the page cache is written back between servers (so that one's
writeback never lands on the next one's clock); each figure is the median over rounds.
Each rate is per wall-clock second and per second of the server's own CPU time (/proc
utime + stime, all threads, and its child processes: tsd's telnet workers).

Also measured in the same run: ``Storage.put`` of the same cells pre-encoded, in process
(the storage's own ceiling).

Run: ``python -m bench.ingest [--points N] [--connections C] [--rounds R]
[--modes pinned,shared] [--no-vm] [--baseline REF] [--set KEY=VALUE ...]``
(``--baseline``: tsd from that git ref too, a third server in the same rounds; ``--set``:
a setting of every tsd daemon, e.g. ``tsd.network.worker_threads=0`` for the telnet
workers);
VictoriaMetrics runs when ``victoria-metrics`` is on PATH (``apt-get install
victoria-metrics``), and is skipped otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import orjson

from tsd.codec import KeyLayout, encode_point, make_series_key
from tsd.storage.base import FamilySpec, Put
from tsd.storage.embedded import EmbeddedStorage

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
BASE_TS = int(time.time()) - 7200  # two hours back: stays in open and closed hours alike
#: issue 3 item 11: points/s with the daemon on one core (a shared machine shows it best as
#: points per CPU-second of the daemon; the wall-clock rate is printed beside it)
GOALS = {"telnet steady": 250_000, "/api/put 1000/body": 250_000}
#: issue 11: tsd / VictoriaMetrics, wall clock, both sharing the machine's 2 cores
SHARED_GOAL = 0.5
CHUNK = 64 * 1024
SENTINEL_METRIC = "bench.sentinel"
#: seconds to wait, after the clock, for VictoriaMetrics' /metrics to show every row
VM_COUNT_WAIT_S = 5.0


@dataclass(frozen=True)
class Mode:
    """Where the server and the generator run."""

    name: str
    server_cpus: frozenset[int]
    generator_cpus: frozenset[int]
    #: VictoriaMetrics' GOMAXPROCS: the CPUs its scheduler may use
    vm_procs: int

    def describe(self) -> str:
        server, generator = _cpus(self.server_cpus), _cpus(self.generator_cpus)
        return f"server on CPU {server}, generator on CPU {generator}"


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def modes() -> dict[str, Mode]:
    if (os.cpu_count() or 1) < 2 or shutil.which("taskset") is None:
        one = frozenset({0})
        return {"shared": Mode("shared", one, one, 1)}
    return {
        "pinned": Mode("pinned", frozenset({0}), frozenset({1}), 1),
        "shared": Mode("shared", frozenset({0, 1}), frozenset({0, 1}), 2),
    }


def taskset(cpus: frozenset[int]) -> list[str]:
    return ["taskset", "-c", _cpus(cpus)] if shutil.which("taskset") else []


def pin(cpu: int) -> list[str]:
    """A taskset prefix to one CPU when there are two CPUs to spread over."""
    return taskset(frozenset({cpu})) if (os.cpu_count() or 1) >= 2 else []


# -- the servers ------------------------------------------------------------------------------


@dataclass
class Server:
    """A running server and how to tell that it has taken everything sent."""

    name: str
    process: asyncio.subprocess.Process
    port: int
    http_port: int

    async def end_telnet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After the last line of a connection: return once the server has taken them."""
        raise NotImplementedError

    async def end_round(self, session: aiohttp.ClientSession) -> None:
        """After every connection ended: return once every point is where the method says."""

    async def count(self, session: aiohttp.ClientSession) -> int:
        """The server's counter of points taken (a check, read outside the clock)."""
        raise NotImplementedError

    async def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        await self.process.wait()


class Tsd(Server):
    #: the telnet ``version`` reply (GET /version answers the same text)
    reply = b""
    sentinels = 0

    async def learn_version_reply(self) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/version") as response,
        ):
            self.reply = await response.read()

    async def end_telnet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"version\n")
        await writer.drain()
        answer = await reader.readexactly(len(self.reply))
        if answer != self.reply:
            raise RuntimeError(f"tsd answered {answer[:200]!r} to version")
        writer.close()
        await writer.wait_closed()

    async def end_round(self, session: aiohttp.ClientSession) -> None:
        self.sentinels += 1
        point = {
            "metric": SENTINEL_METRIC,
            "timestamp": BASE_TS + self.sentinels,
            "value": self.sentinels,
            "tags": {"host": "bench"},
        }
        url = f"http://127.0.0.1:{self.port}/api/put?sync"
        async with session.post(url, data=orjson.dumps(point)) as response:
            if response.status != 204:
                raise RuntimeError(f"/api/put?sync answered {response.status}")
        # A store that writes batches concurrently (HBase) may still be writing an earlier
        # one: then wait (tsd's counters are exact, computed when asked) until all are.
        for _ in range(100_000):
            stats = await self.stats(session)
            if stats.get("tsd.datapoints.stored", 0) >= stats.get("tsd.datapoints.added", 0):
                return
            await asyncio.sleep(0.005)
        raise RuntimeError("tsd never stored every point it added")

    async def stats(self, session: aiohttp.ClientSession) -> dict[str, int]:
        async with session.get(f"http://127.0.0.1:{self.port}/api/stats") as response:
            records = orjson.loads(await response.read())
        found: dict[str, int] = {}
        for r in records:
            found[r["metric"]] = found.get(r["metric"], 0) + int(r["value"])
        return found

    async def count(self, session: aiohttp.ClientSession) -> int:
        stats = await self.stats(session)
        added = stats.get("tsd.datapoints.added", 0)
        stored = stats.get("tsd.datapoints.stored", 0)
        if stored != added:  # the sync point's reply came before all of them were stored
            raise RuntimeError(f"tsd: {added} points added, {stored} stored after the round")
        return added - self.sentinels


class Victoria(Server):
    async def end_telnet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write_eof()  # shutdown(SHUT_WR)
        extra = await reader.read()  # until the server closes its side
        if extra:
            raise RuntimeError(f"victoria-metrics answered {extra[:200]!r}")
        writer.close()
        await writer.wait_closed()

    async def count(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"http://127.0.0.1:{self.http_port}/metrics") as response:
            text = await response.read()
        return sum(int(m) for m in _VM_ROWS.findall(text))


_VM_ROWS = re.compile(rb'^vm_rows_inserted_total\{type="opentsdb(?:http)?"\} (\d+)', re.M)


async def start_tsd(
    data_dir: Path,
    mode: Mode,
    *,
    source: Path | None = None,
    settings: dict[str, str] | None = None,
) -> Tsd:
    """``tsdb tsd`` on the embedded store in ``data_dir`` (or as ``settings`` say), from
    this checkout or from the tsd sources under ``source`` (another commit's)."""
    keys = {"tsd.logging.format": "json", **(settings or {})}
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source)
    process = await asyncio.create_subprocess_exec(
        *taskset(mode.server_cpus),
        sys.executable,
        "-m",
        "tsd",
        "tsd",
        "--bind",
        "127.0.0.1",
        "--port",
        str(free_port()) if os.environ.get(PORTS_ENV) else "0",
        "--auto-metric",
        "--data-dir",
        str(data_dir),
        *[arg for key, value in keys.items() for arg in ("--set", f"{key}={value}")],
        stderr=asyncio.subprocess.PIPE,
        cwd=source,
        env=env,
    )
    assert process.stderr is not None
    while line := await process.stderr.readline():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == "daemon.started":
                port = int(event["port"])
                asyncio.ensure_future(process.stderr.read())  # keep draining its log
                server = Tsd("tsd", process, port, port)
                await server.learn_version_reply()
                return server
    raise RuntimeError("tsd did not start")


#: ``LOW-HIGH``: the ports a server started here may take (a machine shared by several
#: runs gives each its own range); unset, whatever the kernel picks
PORTS_ENV = "TSD_BENCH_PORTS"
_next_port = 0


def free_port() -> int:
    """A free loopback port (within ``TSD_BENCH_PORTS`` when set)."""
    global _next_port
    span = os.environ.get(PORTS_ENV, "")
    if not span:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    low, high = (int(p) for p in span.split("-"))
    for _ in range(high - low + 1):
        port = low + _next_port % (high - low + 1)
        _next_port += 1
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    raise RuntimeError(f"no free port in {PORTS_ENV}={span}")


async def start_vm(data_dir: Path, mode: Mode, *flags: str) -> Server | None:
    """VictoriaMetrics with its OpenTSDB listener (and ``flags``), None without the binary."""
    binary = shutil.which("victoria-metrics")
    if binary is None:
        return None
    http_port, tsdb_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        *taskset(mode.server_cpus),
        binary,
        f"-storageDataPath={data_dir}",
        f"-httpListenAddr=127.0.0.1:{http_port}",
        f"-opentsdbListenAddr=127.0.0.1:{tsdb_port}",
        "-loggerLevel=ERROR",
        *flags,
        env={**os.environ, "GOMAXPROCS": str(mode.vm_procs)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    server = Victoria("victoria-metrics", process, tsdb_port, http_port)
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            with contextlib.suppress(aiohttp.ClientError, OSError):
                await server.count(session)
                # the OpenTSDB listener may come up after the HTTP one
                _, writer = await asyncio.open_connection("127.0.0.1", tsdb_port)
                writer.close()
                return server
            await asyncio.sleep(0.05)
    raise RuntimeError("victoria-metrics did not start")


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


async def send_telnet(server: Server, chunks: list[bytes], acked: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
    await server.end_telnet(reader, writer)
    acked.append(time.perf_counter())


async def send_http(
    session: aiohttp.ClientSession, port: int, bodies: list[bytes], acked: list[float]
) -> None:
    for body in bodies:
        async with session.post(f"http://127.0.0.1:{port}/api/put", data=body) as response:
            if response.status not in (200, 204):
                raise RuntimeError(f"/api/put answered {response.status}: {await response.text()}")
    acked.append(time.perf_counter())


@dataclass(frozen=True)
class Rate:
    """Points per wall-clock second until the clock stopped, per second of the server's
    own CPU time meanwhile, and per wall-clock second until the last connection's end
    (tsd's ``version`` replies / last /api/put reply, before the ``sync`` point)."""

    wall: float
    cpu: float
    acked: float


@dataclass
class Rates:
    """Every round's rate per scenario; figures are medians."""

    rounds: dict[str, list[Rate]] = field(default_factory=dict)

    def add(self, scenario: str, rate: Rate) -> None:
        self.rounds.setdefault(scenario, []).append(rate)

    def median(self, scenario: str) -> Rate:
        rates = self.rounds[scenario]
        return Rate(
            statistics.median(r.wall for r in rates),
            statistics.median(r.cpu for r in rates),
            statistics.median(r.acked for r in rates),
        )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """:func:`cpu_seconds` of a process and its live children (tsd's telnet workers,
    tsd.network.worker_threads), which run for the whole round."""
    total = cpu_seconds(pid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def timed(
    server: Server,
    session: aiohttp.ClientSession,
    points: int,
    senders: Callable[[list[float]], Sequence[Awaitable[None]]],
) -> Rate:
    """From the first byte sent until the server has taken every point (see the module
    docstring for what "taken" means for each server)."""
    acked: list[float] = []
    cpu_start = tree_cpu_seconds(server.process.pid)
    start = time.perf_counter()
    await asyncio.gather(*senders(acked))
    await server.end_round(session)
    wall = time.perf_counter() - start
    cpu = max(tree_cpu_seconds(server.process.pid) - cpu_start, 1e-3)
    return Rate(points / wall, points / cpu, points / (max(acked) - start))


async def check_count(server: Server, session: aiohttp.ClientSession, expected: int) -> None:
    """After the clock: the server's counter shows every point sent so far."""
    deadline = time.monotonic() + VM_COUNT_WAIT_S
    while (count := await server.count(session)) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} counted {count} of {expected} points")
        await asyncio.sleep(0.1)
    if count != expected:
        raise RuntimeError(f"{server.name} counted {count} points, {expected} were sent")


# -- scenarios --------------------------------------------------------------------------------


async def run_scenarios(server: Server, args: argparse.Namespace, rates: Rates) -> None:
    n, conns, series = args.points, args.connections, args.series
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conns)) as session:
        total = 0

        async def telnet(name: str, lines: list[bytes]) -> None:
            nonlocal total
            per = chunks_per_connection(lines, conns)
            rate = await timed(
                server,
                session,
                len(lines),
                lambda acked: [send_telnet(server, chunks, acked) for chunks in per],
            )
            total += len(lines)
            await check_count(server, session, total)
            rates.add(name, rate)

        async def http(name: str, bodies: list[bytes], points: int) -> None:
            nonlocal total
            rate = await timed(
                server,
                session,
                points,
                lambda acked: [
                    send_http(session, server.port, bodies[i::conns], acked) for i in range(conns)
                ],
            )
            total += points
            await check_count(server, session, total)
            rates.add(name, rate)

        await telnet("warm-up", telnet_lines(series, 0, series, "tel"))
        await telnet("telnet steady", telnet_lines(n, series, series, "tel"))
        await telnet("telnet cold", telnet_lines(args.cold_points, 0, args.cold_points, "cold"))
        await http("warm-up http", json_bodies(series, 1000, 0, series), series)
        await http("/api/put 1000/body", json_bodies(n, 1000, series, series), n)
        await http("/api/put 50/body", json_bodies(n // 4, 50, series + n, series), n // 4)
    for warm_up in ("warm-up", "warm-up http"):
        rates.rounds.pop(warm_up, None)


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
        await storage.create_table("tsdb", [FamilySpec("t")])
        start = time.perf_counter()
        for i in range(0, len(puts), 50_000):
            await storage.put("tsdb", puts[i : i + 50_000])
        elapsed = time.perf_counter() - start
        await storage.close()
        return points / elapsed

    return asyncio.run(run())


Starter = Callable[[Path, Mode], Awaitable[Server | None]]


def export(ref: str, into: Path) -> Path:
    """The tree of git ``ref`` under ``into`` (``git archive``) with its C helpers built in
    place: a baseline daemon as its commit runs. Without the build the baseline would run
    the Python fallbacks of the hot paths and look several times slower than it is."""
    archive = subprocess.run(
        ["git", "archive", ref], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    if (into / "setup.py").exists():  # commits before the C helpers have none
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=into,
            check=True,
            capture_output=True,
        )
    return into


async def measure(
    args: argparse.Namespace, mode: Mode, baseline: Path | None = None
) -> dict[str, Rates]:
    """Alternating rounds of every server, each on a fresh data directory."""
    os.sched_setaffinity(0, mode.generator_cpus)
    settings = dict(item.split("=", 1) for item in args.set)

    async def start_after(data_dir: Path, mode: Mode) -> Server | None:
        return await start_tsd(data_dir, mode, settings=settings)

    servers: list[tuple[str, Starter]] = [("tsd", start_after)]
    if baseline is not None:

        async def start_before(data_dir: Path, mode: Mode) -> Server | None:
            return await start_tsd(data_dir, mode, source=baseline, settings=settings)

        servers.append(("before", start_before))
    if not args.no_vm:
        servers.append(("VM", start_vm))
    found: dict[str, Rates] = {}
    for number in range(args.rounds):
        for name, start in rotated(servers, number):
            with tempfile.TemporaryDirectory() as tmp:
                server = await start(Path(tmp) / "data", mode)
                if server is None:
                    continue
                try:
                    await run_scenarios(server, args, found.setdefault(name, Rates()))
                finally:
                    await server.stop()
            settle_disk()
    return found


def rotated(servers: list[T], number: int) -> list[T]:
    """The servers in the order of round ``number``: each round starts one further, so
    every server follows every other as often (a server's rounds never all pay for the
    same predecessor's aftermath)."""
    shift = number % len(servers) if servers else 0
    return servers[shift:] + servers[:shift]


def settle_disk() -> None:
    """Write back what the server just stopped left dirty in the page cache, before the
    next one starts: otherwise the kernel's writeback of one server's data (hundreds of
    MB for VictoriaMetrics' merges) lands on the next server's clock and cores."""
    os.sync()


METHOD = (
    "clock stops: VM telnet = server closes after our half-close; tsd telnet = `version`"
    " reply on every connection, then /api/put?sync of one point (embedded store: all"
    " points fsynced); /api/put = last reply (tsd: then the sync point); counters checked"
    " after the clock"
)


def report(mode: Mode, found: dict[str, Rates], args: argparse.Namespace) -> None:
    tsd, vm, before = found["tsd"], found.get("VM"), found.get("before")
    print(f"\nmode {mode.name}: {mode.describe()}; VM GOMAXPROCS={mode.vm_procs}")
    print("  median of rounds; points/s wall clock | points per CPU-second of the daemon")
    header = f"  {'scenario':20} {'tsd':>10} {'tsd acked':>10} {'tsd/cpu':>10}"
    if vm:
        header += f" {'VM':>10} {'VM/cpu':>10} {'tsd/VM':>7} {'cpu ratio':>9}"
    if before:
        header += f" {'before':>10} {'tsd/before':>10} {'before/cpu':>10} {'cpu ratio':>9}"
    print(header)
    for name in tsd.rounds:
        rate = tsd.median(name)
        row = f"  {name:20} {rate.wall:10,.0f} {rate.acked:10,.0f} {rate.cpu:10,.0f}"
        if vm and name in vm.rounds:
            other = vm.median(name)
            row += f" {other.wall:10,.0f} {other.cpu:10,.0f} {rate.wall / other.wall:7.2f}"
            row += f" {rate.cpu / other.cpu:9.2f}"
        if before and name in before.rounds:
            old = before.median(name)
            row += f" {old.wall:10,.0f} {rate.wall / old.wall:10.2f}"
            row += f" {old.cpu:10,.0f} {rate.cpu / old.cpu:9.2f}"
        print(row)
    if mode.name == "pinned":
        for scenario, goal in GOALS.items():
            rate = tsd.median(scenario)
            verdict = "met" if max(rate.wall, rate.cpu) >= goal else "not met"
            print(
                f"  goal {scenario}: {goal:,} points/s on one core -> {rate.wall:,.0f} wall,"
                f" {rate.cpu:,.0f} per CPU-second: {verdict}"
            )
    elif vm:
        for scenario in GOALS:
            ratio = tsd.median(scenario).wall / vm.median(scenario).wall
            verdict = "met" if ratio >= SHARED_GOAL else "not met"
            target = f"tsd/VM >= {SHARED_GOAL} sharing 2 cores"
            print(f"  goal {scenario}: {target} -> {ratio:.2f}: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--cold-points", type=int, default=20_000)
    parser.add_argument("--series", type=int, default=1_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per server, alternating")
    parser.add_argument("--modes", default="pinned,shared", help="pinned and/or shared")
    parser.add_argument("--no-vm", action="store_true")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the tsd daemons (and 'before'), e.g. tsd.network.worker_threads=1",
    )
    parser.add_argument(
        "--baseline", metavar="REF", help="also run tsd from this git ref ('before'), alternating"
    )
    args = parser.parse_args()
    available = modes()
    chosen = [available[m] for m in args.modes.split(",") if m in available]
    if not chosen:
        parser.error(f"--modes: choose from {', '.join(available)}")
    shape = f"{args.points:,} points, {args.series:,} series, {args.connections} connections"
    print(f"ingest: {shape}; {args.rounds} alternating rounds per server, medians")
    print(f"  {METHOD}")
    if args.set:
        print(f"  tsd settings: {', '.join(args.set)}")
    with tempfile.TemporaryDirectory() as exported:
        baseline = export(args.baseline, Path(exported)) if args.baseline else None
        if args.baseline:
            print(f"  before = tsd at {args.baseline}, after (tsd) = this checkout")
        for mode in chosen:
            report(mode, asyncio.run(measure(args, mode, baseline)), args)
    os.sched_setaffinity(0, chosen[0].generator_cpus)
    with tempfile.TemporaryDirectory() as tmp:
        put_rate = storage_baseline(Path(tmp) / "s", args.points, args.series)
    print(f"\nStorage.put of pre-encoded cells, in process: {put_rate:,.0f} cells/s")


if __name__ == "__main__":
    main()
