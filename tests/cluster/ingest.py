"""A steady telnet ingest and its read-back, shared by the cluster's fault tests."""

from __future__ import annotations

import asyncio
import time

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


async def write_steadily(port: int, base_s: int, ticks: int) -> list[str]:
    """``ticks`` rounds of one point per series, TICKS_PER_S a second; returns every line
    tsd answered that were errors (a put answers nothing unless it fails), read up to the
    reply of a ``version`` sent last."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    for tick in range(ticks):
        lines = "".join(f"put {METRIC} {base_s + tick} {tick} s=s{s}\n" for s in range(SERIES))
        writer.write(lines.encode())
        await writer.drain()
        await asyncio.sleep(max(0.0, started + (tick + 1) / TICKS_PER_S - time.monotonic()))
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
    return [line for line in answered if line.startswith("put:")]


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
