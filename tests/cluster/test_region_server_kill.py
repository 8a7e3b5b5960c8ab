"""kill -9 of the region server holding the data table's region, under a steady telnet
ingest: its region moves to the other region server, tsd keeps accepting (no error line),
every point it accepted is read back, and a ``tsd.mode=ro`` tsd asked twice a second
answers every query within 10 s throughout, with tsd's default settings (while the region
is not served, with an error: its reads give up after the default read timeout, 5 s; the
number of errors is reported). The longest pause of writes
reaching storage or the spool, and the spool's peak backlog, are measured and reported
(printed, and recorded as the test's ``longest_pause_s`` property)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.conftest import HBaseCluster
from tests.cluster.ingest import (
    KILL_AFTER_S,
    SERIES,
    TICKS_PER_S,
    WRITE_S,
    assert_answered_within,
    query_steadily,
    region_servers_of,
    report_fault,
    wait_stored,
    watch_progress,
    write_steadily,
)
from tests.hbase.tsd_process import tsd_process

# the cluster's start (first test) is a minute on two idle cores; more when loaded
#: the read-only tsd's longest answer during the fault (the issue's acceptance)
QUERY_WITHIN_S = 10.0
#: A query tsd with the default settings: its read calls give up after
#: tsd.storage.hbase.thrift.read_timeout (5 s), or a scan of a region nobody serves would wait
#: out the region server's recovery (the gateway's HBase client retries a scanner for as long
#: as its retries last: 15-20 s on a loaded machine, over 10 s in two runs of two at 30 s).
READER = {"tsd.mode": "ro"}

pytestmark = [pytest.mark.slow, pytest.mark.hbase, pytest.mark.cluster, pytest.mark.timeout(900)]


async def test_kill_of_the_data_region_server_loses_no_accepted_point(
    hbase_cluster: HBaseCluster, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    cfg = hbase_cluster.storage_config()
    ticks = int(WRITE_S * TICKS_PER_S)
    base_s = int(time.time()) - 3600
    async with (
        tsd_process(cfg, tmp_path / "writer.log") as port,
        tsd_process(cfg, tmp_path / "reader.log", READER) as reader,
    ):
        stop = asyncio.Event()
        watch = asyncio.create_task(watch_progress(port, stop))
        writing = asyncio.create_task(write_steadily(port, base_s, ticks))
        await asyncio.sleep(KILL_AFTER_S)
        # the metric has its UID by now: the reader is asked from here on
        reading = asyncio.create_task(query_steadily(reader, base_s, ticks, stop, QUERY_WITHIN_S))
        holders = await asyncio.to_thread(region_servers_of, hbase_cluster, cfg.data_table)
        assert len(holders) == 1, holders
        victim = hbase_cluster.region_server_of(holders[0])
        hbase_cluster.kill(victim)
        try:
            assert await writing == []
            assert await wait_stored(port, base_s, ticks) == ticks * SERIES
            stop.set()
            progress = await watch
            answers = await reading
            report_fault(f"region server {victim} killed", progress, answers, record_property)
            assert_answered_within(answers, QUERY_WITHIN_S)
            moved = await asyncio.to_thread(region_servers_of, hbase_cluster, cfg.data_table)
            assert hbase_cluster.region_server_of(moved[0]) != victim
        finally:
            hbase_cluster.revive(victim)
