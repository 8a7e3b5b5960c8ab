"""OpenTSDB 2.4.1 itself on the test HBase: it starts on tables tsd created and accepts a put.

The proof that the interoperability tests can be built (issue 4, item 7): the Java TSD,
with asynchbase 1.8.2 and the ZooKeeper 3.4.6 client, runs against HBase 2.6 on JDK 17,
and the cells it writes are read back through tsd's HBase backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.hbase.opentsdb import OpenTSDB, running_opentsdb
from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.config import StorageConfig
from tsd.storage.base import ScanSpec
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings
from tsd.tools.create_tables import create_tables

pytestmark = pytest.mark.hbase

BASE_TIME_S = 1356998400  # 2013-01-01T00:00:00Z, an hour boundary


@pytest.fixture
async def tables(hbase_server: HBaseServer) -> AsyncIterator[StorageConfig]:
    prefix = unique_prefix()
    cfg = hbase_server.storage_config(
        data_table=f"{prefix}tsdb",
        uid_table=f"{prefix}tsdb-uid",
        tree_table=f"{prefix}tsdb-tree",
        meta_table=f"{prefix}tsdb-meta",
    )
    storage = HBaseStorage(hbase_settings(cfg))
    await create_tables(storage, cfg)
    await storage.close()
    yield cfg
    if not hbase_server.owned:
        await drop_tables(hbase_server, prefix)


@pytest.fixture
async def opentsdb(
    hbase_server: HBaseServer, tables: StorageConfig, tmp_path: Path
) -> AsyncIterator[OpenTSDB]:
    async with running_opentsdb(hbase_server, tables, tmp_path) as tsdb:
        yield tsdb


async def test_opentsdb_accepts_a_put_that_tsd_reads(opentsdb: OpenTSDB, tables) -> None:
    point = {"metric": "sys.cpu.user", "timestamp": BASE_TIME_S + 61, "value": 42}
    point["tags"] = {"host": "web01"}
    async with aiohttp.ClientSession() as http:
        # sync: answer once the point is in HBase (OpenTSDB buffers puts for up to 1 s)
        put = f"{opentsdb.url}/api/put?details&sync&sync_timeout=60000"
        async with http.post(put, json=[point]) as reply:
            assert (reply.status, await reply.json()) == (
                200,
                {"success": 1, "failed": 0, "timeouts": 0, "errors": []},
            )
        query = f"{opentsdb.url}/api/query?start={BASE_TIME_S}&end={BASE_TIME_S + 3600}"
        async with http.get(f"{query}&m=sum:sys.cpu.user") as reply:
            answer = await reply.json()
    assert answer[0]["dps"] == {str(BASE_TIME_S + 61): 42}

    storage = HBaseStorage(hbase_settings(tables))
    try:
        uids = {
            (cell.qualifier, row.key): cell.value
            async for row in storage.scan(tables.uid_table, ScanSpec(families=("id",)))
            for cell in row.cells
        }
        rows = [row async for row in storage.scan(tables.data_table, ScanSpec())]
    finally:
        await storage.close()
    metric = uids[(b"metrics", b"sys.cpu.user")]
    host, web01 = uids[(b"tagk", b"host")], uids[(b"tagv", b"web01")]
    # OpenTSDB's row: metric uid, base time, tag pairs; one cell: 61 s << 4, flags 0, one byte.
    assert [(row.key, [(c.family, c.qualifier, c.value) for c in row.cells]) for row in rows] == [
        (
            metric + BASE_TIME_S.to_bytes(4, "big") + host + web01,
            [("t", (61 << 4).to_bytes(2, "big"), b"\x2a")],
        )
    ]
