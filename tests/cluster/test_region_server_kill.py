"""kill -9 of the region server holding the data table's region, under a steady telnet
ingest: its region moves to the other region server, tsd keeps accepting (no error line),
and every point it accepted is read back. The longest pause of writes reaching storage or
the spool, and the spool's peak backlog, are measured and reported (printed, and recorded
as the test's ``longest_pause_s`` property)."""

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
    region_servers_of,
    wait_stored,
    watch_progress,
    write_steadily,
)
from tests.hbase.tsd_process import tsd_process

# the cluster's start (first test) is a minute on two idle cores; more when loaded
pytestmark = [pytest.mark.slow, pytest.mark.hbase, pytest.mark.cluster, pytest.mark.timeout(900)]


async def test_kill_of_the_data_region_server_loses_no_accepted_point(
    hbase_cluster: HBaseCluster, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    cfg = hbase_cluster.storage_config()
    ticks = int(WRITE_S * TICKS_PER_S)
    base_s = int(time.time()) - 3600
    async with tsd_process(cfg, tmp_path / "tsd.log") as port:
        stop = asyncio.Event()
        watch = asyncio.create_task(watch_progress(port, stop))
        writing = asyncio.create_task(write_steadily(port, base_s, ticks))
        await asyncio.sleep(KILL_AFTER_S)
        holders = await asyncio.to_thread(region_servers_of, hbase_cluster, cfg.data_table)
        assert len(holders) == 1, holders
        victim = hbase_cluster.region_server_of(holders[0])
        hbase_cluster.kill(victim)
        try:
            assert await writing == []
            assert await wait_stored(port, base_s, ticks) == ticks * SERIES
            stop.set()
            progress = await watch
            print(
                f"region server {victim} killed: longest pause of writes reaching storage "
                f"or the spool {progress.longest_pause_s:.1f} s (from "
                f"{progress.pause_began_s - KILL_AFTER_S:+.1f} s after the kill's call), "
                f"spool peak {progress.backlog_peak_cells} cells, {progress.polls} polls"
            )
            record_property("longest_pause_s", round(progress.longest_pause_s, 2))
            record_property("spool_peak_cells", progress.backlog_peak_cells)
            moved = await asyncio.to_thread(region_servers_of, hbase_cluster, cfg.data_table)
            assert hbase_cluster.region_server_of(moved[0]) != victim
        finally:
            hbase_cluster.revive(victim)
