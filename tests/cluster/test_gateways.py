"""Two Thrift gateways listed in tsd.storage.hbase.thrift.host, on the cluster: both carry
calls; kill -9 of either (one run each) under a steady telnet ingest loses nothing, answers
no put with an error, a query during the outage answers, a ``tsd.mode=ro`` tsd on both
gateways asked twice a second answers every query within 10 s throughout (default
settings; a query whose scanner was on the killed gateway with a 503), and tsd goes back
to the gateway once it is started again. The longest pause of writes reaching storage or
the spool and the reader's slowest answer are measured and reported (printed, and
recorded as the test's ``longest_pause_s`` and ``reader_slowest_s`` properties)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cluster.conftest import HBaseCluster
from tests.cluster.ingest import (
    KILL_AFTER_S,
    METRIC,
    SERIES,
    TICKS_PER_S,
    WRITE_S,
    assert_answered_within,
    query_steadily,
    report_fault,
    wait_stored,
    watch_progress,
    write_steadily,
)
from tests.hbase.tsd_process import tsd_process

pytestmark = [pytest.mark.slow, pytest.mark.hbase, pytest.mark.cluster, pytest.mark.timeout(900)]

#: a gateway that is back is used again within the pool's longest probe interval (5 s)
BACK_WITHIN_S = 90.0  # its JVM starts first: slow on a loaded machine
#: the read-only tsd's longest answer during the fault (the issue's acceptance)
QUERY_WITHIN_S = 10.0


async def gateways(http: aiohttp.ClientSession, port: int) -> dict[str, dict[str, Any]]:
    """endpoint -> its /api/stats/region_clients entry."""
    url = f"http://127.0.0.1:{port}/api/stats/region_clients"
    async with http.get(url) as reply:
        return {client["endpoint"]: client for client in await reply.json()}


async def listening(ports: list[int], within_s: float = BACK_WITHIN_S) -> None:
    """Every gateway accepts connections (one killed and started again by an earlier run
    may still be starting)."""
    deadline = time.monotonic() + within_s
    for port in ports:
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                assert time.monotonic() < deadline, f"gateway on port {port} not listening"
                await asyncio.sleep(0.5)
            else:
                writer.close()
                break


async def gateway_stats(http: aiohttp.ClientSession, port: int) -> dict[str, dict[str, int]]:
    """endpoint -> {"calls", "errors", "up"}: ``tsd.hbase.gateway.*`` in /api/stats, checked
    against the same figures' ``tsd_hbase_gateway_*`` samples in /metrics."""
    async with http.get(f"http://127.0.0.1:{port}/api/stats") as reply:
        records = await reply.json()
    stats: dict[str, dict[str, int]] = {}
    for record in records:
        kind = record["metric"].removeprefix("tsd.hbase.gateway.")
        if kind != record["metric"]:
            stats.setdefault(record["tags"]["gateway"], {})[kind] = int(record["value"])
    async with http.get(f"http://127.0.0.1:{port}/metrics") as reply:
        exposed = await reply.text()
    for endpoint, figures in stats.items():
        assert f'tsd_hbase_gateway_up{{gateway="{endpoint}"}} {figures["up"]}.0' in exposed
        assert f'tsd_hbase_gateway_errors_total{{gateway="{endpoint}"}}' in exposed
    return stats


@pytest.mark.parametrize("victim", [0, 1])
async def test_two_gateways_carry_calls_and_one_killed_loses_nothing(
    hbase_cluster: HBaseCluster,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
    victim: int,
) -> None:
    ports = hbase_cluster.thrift_ports
    await listening(ports)
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    cfg = hbase_cluster.storage_config()
    extra = {"tsd.storage.hbase.thrift.host": hosts}
    ticks = int(WRITE_S * TICKS_PER_S)
    base_s = int(time.time()) - 3600
    # the gateway killed, and the other one
    first, second = (f"127.0.0.1:{ports[i]}" for i in (victim, 1 - victim))
    async with (
        tsd_process(cfg, tmp_path / "writer.log", extra) as port,
        tsd_process(cfg, tmp_path / "reader.log", {**extra, "tsd.mode": "ro"}) as reader,
        aiohttp.ClientSession() as http,
    ):
        stop = asyncio.Event()
        watch = asyncio.create_task(watch_progress(port, stop))
        writing = asyncio.create_task(write_steadily(port, base_s, ticks))
        await asyncio.sleep(KILL_AFTER_S)
        # the metric has its UID by now: the reader is asked from here on
        reading = asyncio.create_task(query_steadily(reader, base_s, ticks, stop, QUERY_WITHIN_S))
        before = await gateways(http, port)
        assert before[first]["rpcsSent"] > 0, before
        assert before[second]["rpcsSent"] > 0, before
        hbase_cluster.kill(f"thrift{victim}")
        try:
            await asyncio.sleep(2.0)
            # a query during the outage answers (its scanners open on the gateway left)
            query = f"http://127.0.0.1:{port}/api/query?start={base_s}&m=sum:{METRIC}"
            async with asyncio.timeout(10), http.get(query) as reply:
                assert reply.status == 200, await reply.text()
            during = await gateways(http, port)
            assert during[first]["dead"] is True
            assert during[second]["dead"] is False
            # per gateway in /api/stats and /metrics: both carried calls, the dead one failed
            stats = await gateway_stats(http, port)
            assert (stats[first]["up"], stats[second]["up"]) == (0, 1), stats
            assert stats[first]["errors"] >= 1, stats
            assert min(stats[first]["calls"], stats[second]["calls"]) > 0, stats
            assert await writing == []
            assert await wait_stored(port, base_s, ticks) == ticks * SERIES
            stop.set()
            progress = await watch
            answers = await reading
            report_fault(f"gateway thrift{victim} killed", progress, answers, record_property)
            # a query whose scanner was on the killed gateway fails (a 503); the next ones
            # open theirs on the gateway left
            assert_answered_within(answers, QUERY_WITHIN_S)
        finally:
            stop.set()
            hbase_cluster.revive(f"thrift{victim}")
        # back in use once it answers
        deadline = time.monotonic() + BACK_WITHIN_S
        sent = (await gateways(http, port))[first]["rpcsSent"]
        back = False
        while not back and time.monotonic() < deadline:
            async with http.post(
                f"http://127.0.0.1:{port}/api/put?sync",
                json={"metric": METRIC, "timestamp": base_s, "value": 1, "tags": {"s": "x"}},
            ) as reply:
                assert reply.status == 204
            now = await gateways(http, port)
            back = now[first]["dead"] is False and now[first]["rpcsSent"] > sent
            await asyncio.sleep(0.5)
        assert back
