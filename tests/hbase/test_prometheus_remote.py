"""Prometheus' remote write and remote read on HBase, and OpenTSDB 2.4.1 reading what
remote write stored (issue 30, item 4).

The round trip of ``tests/server/test_prometheus_remote.py`` against a daemon on the
harness's HBase: a Prometheus scrapes itself and the daemon and remote writes to it, a
second one reads the window back through remote read only, and both give the same raw
samples; then OpenTSDB 2.4.1, started on the same tables, answers /api/query with exactly
those samples under the mapped names, as tsd's /api/query does.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.hbase.opentsdb import fresh_tables, running_opentsdb, started_tsd
from tests.hbase_harness import HBaseServer
from tests.prometheus import (
    ROUND_TRIP_SECONDS,
    as_opentsdb,
    check_round_trip,
    finite,
    prometheus_binary,
    query_api_samples,
    remote_round_trip,
    window_ms,
)

SECONDS = ROUND_TRIP_SECONDS

pytestmark = [
    pytest.mark.hbase,
    pytest.mark.slow,
    pytest.mark.timeout(SECONDS + 240),
    pytest.mark.skipif(prometheus_binary() is None, reason="prometheus is not installed"),
]

OPENTSDB_CONF = {
    "tsd.storage.compaction.min_flush_threshold": "1000000000",
    "tsd.http.request.enable_chunked": "true",
    "tsd.http.request.max_chunk": "1048576",
    "tsd.storage.max_tags": "16",
}


async def test_remote_storage_on_hbase_and_opentsdb_reads_it(
    hbase_server: HBaseServer, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        cfg = await stack.enter_async_context(fresh_tables(hbase_server))
        keys = {"tsd.storage.max_tags": "16"}
        daemon = await started_tsd(stack, cfg, tmp_path / "tsd", **keys)
        trip = await remote_round_trip(daemon.port, tmp_path, SECONDS)
        start_ms, end_ms = window_ms(trip)
        expected = as_opentsdb(finite(trip.local))
        tsd_url = f"http://127.0.0.1:{daemon.port}"
        check_round_trip(trip, await query_api_samples(tsd_url, expected, start_ms, end_ms))
        assert daemon.registry.counter("ingest.errors", protocol="prometheus").value == 0
        await daemon.writer.flush()
        opentsdb = await stack.enter_async_context(
            running_opentsdb(hbase_server, cfg, tmp_path / "opentsdb", OPENTSDB_CONF)
        )
        from_opentsdb = await query_api_samples(opentsdb.url, expected, start_ms, end_ms)
        assert set(from_opentsdb) >= set(expected), sorted(set(expected) - set(from_opentsdb))[:5]
        for name, points in expected.items():
            assert from_opentsdb[name] == points, name
