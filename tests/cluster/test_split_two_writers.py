"""A forced split of the data table while two write TSDs take a steady telnet ingest on
overlapping series and a ``tsd.mode=ro`` TSD answers queries, then OpenTSDB 2.4.1 on the
same tables: one scenario, so that the cluster's JVMs are started once for all of it.

- The split (``scripts/hbase split``: HBase's Admin.split) happens under the ingest: no put
  is answered with an error, and every point both writers accepted is read back.
- The writers race for the same new names (the metric, the tag key, ten tag values): one
  UID per name, no orphan reverse mapping; ``tsdb fsck``, ``tsdb uid fsck`` and OpenTSDB's
  ``uid fsck`` find nothing.
- The read-only TSD answers every query within 10 s during the split, and sees every point
  of both writers.
- OpenTSDB 2.4.1, on the cluster's ZooKeeper, reads the same points afterwards.
- The longest pause of writes reaching storage or the spool is measured on each writer and
  reported (printed, and recorded as the test's ``longest_pause_s`` property).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import pytest

from tests.cluster.conftest import HBaseCluster
from tests.cluster.ingest import (
    METRIC,
    READ_BACK_TIMEOUT_S,
    SERIES,
    TICKS_PER_S,
    query_steadily,
    region_servers_of,
    watch_progress,
    write_while,
)
from tests.hbase.opentsdb import fresh_tables, read_uid_table, running_opentsdb
from tests.hbase.test_uid_blocks import Fscks
from tests.hbase.tsd_process import tsd_process
from tests.tools.test_fsck import counters
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

pytestmark = [pytest.mark.slow, pytest.mark.hbase, pytest.mark.cluster, pytest.mark.timeout(900)]

#: the writers write for at least this long, and on until this long after the split is done
#: (the split's own JVM takes 5-15 s to start on a loaded machine)
WRITE_S = 10.0
SPLIT_AFTER_S = 3.0
AFTER_SPLIT_S = 3.0
#: writer two's points are an hour after writer one's (same series, points of their own)
SECOND_OFFSET_S = 3600
#: the writers' series overlap by half: s0..s19 and s10..s29
FIRST = range(SERIES)
SECOND = range(SERIES // 2, SERIES + SERIES // 2)
#: the reader's longest answer during the fault (the issue's acceptance)
QUERY_WITHIN_S = 10.0
NO_COMPACTION = {"tsd.storage.enable_compaction": "false"}

Series = dict[str, dict[str, float]]  # tag value -> timestamp (as a string) -> value


def expected(base_first: int, ticks: tuple[int, int]) -> Series:
    """Every point both writers sent, by series: writer one's at base_first + tick, writer
    two's an hour later, the value ``tick``."""
    want: Series = {}
    writers = ((base_first, FIRST, ticks[0]), (base_first + SECOND_OFFSET_S, SECOND, ticks[1]))
    for base, series, count in writers:
        for s in series:
            want.setdefault(f"s{s}", {}).update({str(base + t): t for t in range(count)})
    return want


async def series_read(url: str, start: int, end: int, known: bool = True) -> Series:
    """tag value -> dps of ``sum:METRIC{s=*}`` from a TSD's /api/query (tsd or OpenTSDB);
    ``known=False``: nothing yet while the metric has no UID (a 400)."""
    query = f"{url}/api/query?start={start}&end={end}&m=sum:{METRIC}%7Bs=*%7D"
    async with aiohttp.ClientSession() as http, http.get(query) as reply:
        if not known and reply.status == 400 and "No such name" in await reply.text():
            return {}
        assert reply.status == 200, await reply.text()
        return {answer["tags"]["s"]: answer["dps"] for answer in await reply.json()}


async def read_until(url: str, start: int, end: int, done: Callable[[Series], bool]) -> Series:
    deadline = time.monotonic() + READ_BACK_TIMEOUT_S
    got = await series_read(url, start, end, known=False)
    while not done(got) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        got = await series_read(url, start, end, known=False)
    return got


def names_of(series: Sequence[int]) -> set[str]:
    return {f"s{s}" for s in series}


async def test_split_under_two_writers_and_a_reader_then_opentsdb_reads_it_all(
    hbase_cluster: HBaseCluster, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    server = hbase_cluster.as_server()
    gateways = ",".join(f"127.0.0.1:{port}" for port in hbase_cluster.thrift_ports)
    keys = {"tsd.storage.hbase.thrift.host": gateways}
    least = int(WRITE_S * TICKS_PER_S)
    base_first = int(time.time()) // 3600 * 3600 - 3 * 3600
    start, end = base_first, base_first + 2 * SECOND_OFFSET_S
    split_done = asyncio.Event()

    def more(tick: int) -> bool:
        return tick < least or not split_done.is_set()

    async with fresh_tables(server) as cfg:
        async with (
            tsd_process(cfg, tmp_path / "writer1.log", keys) as first,
            tsd_process(cfg, tmp_path / "writer2.log", keys) as second,
            tsd_process(cfg, tmp_path / "reader.log", {**keys, "tsd.mode": "ro"}) as reader,
        ):
            stop = asyncio.Event()
            watches = [asyncio.create_task(watch_progress(p, stop)) for p in (first, second)]
            writing = asyncio.gather(
                write_while(first, base_first, more, FIRST),
                write_while(second, base_first + SECOND_OFFSET_S, more, SECOND),
            )
            # the reader is asked from the writers' first stored point on (before it, the
            # metric has no UID: OpenTSDB's 400)
            await read_until(f"http://127.0.0.1:{reader}", start, end, bool)
            reading = asyncio.create_task(
                query_steadily(reader, start, end - start, stop, QUERY_WITHIN_S)
            )
            await asyncio.sleep(SPLIT_AFTER_S)
            split = await asyncio.to_thread(hbase_cluster.split, cfg.data_table)
            await asyncio.sleep(AFTER_SPLIT_S)
            split_done.set()
            (errors_first, ticks_first), (errors_second, ticks_second) = await writing
            assert (errors_first, errors_second) == ([], [])
            want = expected(base_first, (ticks_first, ticks_second))
            read = await read_until(f"http://127.0.0.1:{reader}", start, end, want.__eq__)
            stop.set()
            progress = [await watch for watch in watches]
            answers = await reading
        regions = await asyncio.to_thread(region_servers_of, hbase_cluster, cfg.data_table)
        longest = max(p.longest_pause_s for p in progress)
        figures = (
            f"{split}; longest pause of writes reaching storage or the spool: "
            + ", ".join(
                f"{p.longest_pause_s:.1f} s ({p.polls} polls, spool peak "
                f"{p.backlog_peak_cells} cells)"
                for p in progress
            )
            + f"; reader: {len(answers.latencies_s)} queries, slowest "
            f"{max(answers.latencies_s):.2f} s, {len(answers.errors)} answered an error"
        )
        print(figures)
        record_property("longest_pause_s", round(longest, 2))
        record_property("figures", figures)
        assert len(regions) >= 2, regions
        assert read == want
        assert answers.failures == []
        assert answers.errors == []
        assert len(answers.latencies_s) >= WRITE_S  # asked throughout
        assert max(answers.latencies_s) < QUERY_WITHIN_S

        # one UID per name, nothing left of the lost races
        storage = HBaseStorage(hbase_settings(cfg))
        try:
            uids = await read_uid_table(storage, cfg)
        finally:
            await storage.close()
        assert uids.problems() == []
        assert {n.decode() for n in uids.forward["metrics"]} == {METRIC}
        assert {n.decode() for n in uids.forward["tagv"]} == names_of(FIRST) | names_of(SECOND)
        for kind in ("metrics", "tagk", "tagv"):
            assert uids.leaked(kind) == {}, kind

        # both fsck tools of tsd and OpenTSDB's uid fsck clean; OpenTSDB reads every point
        fscks = Fscks(server, cfg, tmp_path / "fsck")
        async with running_opentsdb(server, cfg, tmp_path / "opentsdb", NO_COMPACTION) as tsdb:
            data, uid, (code, theirs), by_opentsdb = await asyncio.gather(
                fscks.target.run("fsck", "--full-scan"),
                fscks.tsd(),
                fscks.opentsdb(),
                series_read(tsdb.url, start, end),
            )
        assert data.code == 0, data.out + data.err
        assert counters(data.out)["Total Errors"] == 0, data.out
        assert counters(data.out)["Rows Processed"] > 0, data.out
        assert uid.code == 0, uid.out + uid.err
        assert uid.out.splitlines()[-1] == "No errors found.", uid.out
        assert code == 0, theirs
        assert "missing" not in theirs, theirs
        assert "Inconsistent" not in theirs, theirs
        assert by_opentsdb == want
