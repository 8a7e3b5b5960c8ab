"""A steady telnet ingest and its read-back, shared by the cluster's fault tests."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence

import aiohttp
from thriftpy2.rpc import make_client

from tests.cluster.conftest import HBaseCluster
from tsd.storage.hbase.pool import HBASE_THRIFT

METRIC = "cluster.fault"
SERIES = 20
TICKS_PER_S = 10
WRITE_S = 25.0
KILL_AFTER_S = 5.0
READ_BACK_TIMEOUT_S = 120.0


def region_servers_of(cluster: HBaseCluster, table: str) -> list[int]:
    """The RPC ports of the region servers holding ``table``'s regions (Thrift1
    getTableRegions, through the first gateway)."""
    client = make_client(HBASE_THRIFT.Hbase, "127.0.0.1", cluster.thrift_ports[0], timeout=30000)
    try:
        return [region.port for region in client.getTableRegions(table.encode())]
    finally:
        client.close()


async def write_steadily(
    port: int, base_s: int, ticks: int, series: Sequence[int] = range(SERIES)
) -> list[str]:
    """``ticks`` rounds of one point per series (tag ``s=s<i>`` for i in ``series``; point
    ``tick`` at ``base_s + tick``, value ``tick``), TICKS_PER_S a second; returns every line
    tsd answered that were errors (a put answers nothing unless it fails), read up to the
    reply of a ``version`` sent last."""
    errors, _ = await write_while(port, base_s, lambda tick: tick < ticks, series)
    return errors


async def write_while(
    port: int, base_s: int, more: Callable[[int], bool], series: Sequence[int] = range(SERIES)
) -> tuple[list[str], int]:
    """:func:`write_steadily` for as long as ``more(tick)`` says: (the error lines, the
    number of rounds written)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    tick = 0
    while more(tick):
        lines = "".join(f"put {METRIC} {base_s + tick} {tick} s=s{s}\n" for s in series)
        writer.write(lines.encode())
        await writer.drain()
        tick += 1
        await asyncio.sleep(max(0.0, started + tick / TICKS_PER_S - time.monotonic()))
    writer.write(b"version\n")
    await writer.drain()
    answered: list[str] = []
    async with asyncio.timeout(120):
        while not answered or not answered[-1].startswith("Built on "):  # version's 2nd line
            line = await reader.readline()
            if not line:
                raise AssertionError(f"tsd closed the connection; it answered {answered}")
            answered.append(line.decode().rstrip("\n"))
    writer.close()
    return [line for line in answered if line.startswith("put:")], tick


async def points_stored(port: int, base_s: int, ticks: int) -> int:
    url = (
        f"http://127.0.0.1:{port}/api/query?start={base_s}&end={base_s + ticks}"
        f"&m=sum:{METRIC}%7Bs=*%7D"
    )
    async with aiohttp.ClientSession() as http, http.get(url) as reply:
        if reply.status != 200:
            return -1
        return sum(len(series["dps"]) for series in await reply.json())


async def wait_stored(port: int, base_s: int, ticks: int) -> int:
    """Points stored once every point sent is read back, or READ_BACK_TIMEOUT_S passed."""
    deadline = time.monotonic() + READ_BACK_TIMEOUT_S
    stored = await points_stored(port, base_s, ticks)
    while stored != ticks * SERIES and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        stored = await points_stored(port, base_s, ticks)
    return stored


@dataclasses.dataclass
class Progress:
    """What one tsd's /api/stats said while it was watched: the longest time in which no
    point reached storage or the spool (``datapoints.stored`` plus the spool's backlog of
    cells did not grow), and the spool's largest backlog."""

    longest_pause_s: float = 0.0
    pause_began_s: float = 0.0  # since watching began
    backlog_peak_cells: int = 0
    polls: int = 0


async def stored_or_spooled(http: aiohttp.ClientSession, port: int) -> tuple[int, int]:
    """(points stored + cells in the spool's backlog, cells in the backlog) from /api/stats."""
    async with http.get(f"http://127.0.0.1:{port}/api/stats") as reply:
        records = await reply.json()
    stored = backlog = 0
    for record in records:
        name, tags = record["metric"], record["tags"]
        if name.endswith(".datapoints.stored") and tags.get("type") == "all":
            stored = int(record["value"])
        elif name.endswith(".spool.backlog") and tags.get("type") == "cells":
            backlog = int(record["value"])
    return stored + backlog, backlog


async def watch_progress(port: int, stop: asyncio.Event, interval_s: float = 0.2) -> Progress:
    """Poll one tsd's /api/stats every ``interval_s`` until ``stop`` is set (from its first
    stored point on): the longest pause of writes reaching storage or the spool while a
    steady ingest runs, and the spool's peak backlog."""
    progress = Progress()
    began = time.monotonic()
    last_value, last_change = 0, 0.0
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            try:
                async with asyncio.timeout(5):
                    value, backlog = await stored_or_spooled(http, port)
            except (TimeoutError, aiohttp.ClientError):
                value, backlog = last_value, 0
            now = time.monotonic() - began
            progress.polls += 1
            progress.backlog_peak_cells = max(progress.backlog_peak_cells, backlog)
            if value != last_value:
                if last_value and now - last_change > progress.longest_pause_s:
                    progress.longest_pause_s = now - last_change
                    progress.pause_began_s = last_change
                last_value, last_change = value, now
            await asyncio.sleep(interval_s)
    return progress


@dataclasses.dataclass
class Answers:
    """Queries a tsd answered while it was asked steadily: their latencies and statuses."""

    latencies_s: list[float] = dataclasses.field(default_factory=list)
    #: answered, but not 200 (status: body)
    errors: list[str] = dataclasses.field(default_factory=list)
    #: not answered within the time allowed, or the connection failed
    failures: list[str] = dataclasses.field(default_factory=list)


async def query_steadily(
    port: int, base_s: int, span_s: int, stop: asyncio.Event, timeout_s: float = 10.0
) -> Answers:
    """Ask a tsd the ingest's query every half second until ``stop`` is set: a query not
    answered within ``timeout_s`` is a failure, one answered with another status than 200
    an error."""
    answers = Answers()
    url = (
        f"http://127.0.0.1:{port}/api/query?start={base_s}&end={base_s + span_s}"
        f"&m=sum:{METRIC}%7Bs=*%7D"
    )
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            began = time.monotonic()
            try:
                async with asyncio.timeout(timeout_s), http.get(url) as reply:
                    await reply.read()
                    if reply.status != 200:
                        answers.errors.append(f"{reply.status}: {await reply.text()}")
            except (TimeoutError, aiohttp.ClientError) as exc:
                answers.failures.append(repr(exc))
            answers.latencies_s.append(time.monotonic() - began)
            await asyncio.sleep(0.5)
    return answers


def report_fault(
    fault: str,
    progress: Progress,
    answers: Answers,
    record_property: Callable[[str, object], None],
    fault_at_s: float = KILL_AFTER_S,
) -> str:
    """Print and record (``record_property``: the junit report's properties) a fault's
    figures: the writer's longest pause of writes reaching storage or the spool and the
    spool's peak backlog (``progress``), the read-only tsd's slowest answer and its errors
    (``answers``). ``fault_at_s``: when the fault was caused, since watching began."""
    figures = (
        f"{fault}: longest pause of writes reaching storage or the spool "
        f"{progress.longest_pause_s:.1f} s (from {progress.pause_began_s - fault_at_s:+.1f} s "
        f"after the fault), spool peak {progress.backlog_peak_cells} cells, "
        f"{progress.polls} polls; reader: {len(answers.latencies_s)} queries, slowest "
        f"{max(answers.latencies_s, default=0.0):.2f} s, {len(answers.errors)} answered an error"
    )
    print(figures)
    record_property("longest_pause_s", round(progress.longest_pause_s, 2))
    record_property("spool_peak_cells", progress.backlog_peak_cells)
    record_property("reader_slowest_s", round(max(answers.latencies_s, default=0.0), 2))
    record_property("reader_errors", len(answers.errors))
    record_property("figures", figures)
    return figures


def assert_answered_within(answers: Answers, within_s: float) -> None:
    """Every query answered within ``within_s``: a 200, or OpenTSDB's JSON error body for a
    storage failure (a read given up on a region nobody serves, a scanner whose gateway
    died under it)."""
    assert answers.failures == []
    for error in answers.errors:
        assert error.startswith(("500: {", "503: {", "504: {")), error
    assert max(answers.latencies_s) < within_s
