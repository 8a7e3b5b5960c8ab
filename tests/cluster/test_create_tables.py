"""``tsdb create-tables`` against the cluster's Thrift2 gateway: a salted data table made
with one region per salt bucket (counted with Thrift2 getAllRegionLocations); without
``tsd.storage.hbase.thrift2.host`` the HBase shell command that does it is printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.cluster.conftest import HBaseCluster
from tests.hbase.opentsdb import tsd_hbase_keys
from tests.hbase.tsd_process import tsd_process
from tsd.config import StorageConfig
from tsd.storage.hbase.thrift2 import Thrift2Admin

pytestmark = [pytest.mark.slow, pytest.mark.hbase, pytest.mark.cluster, pytest.mark.timeout(900)]

BUCKETS = 4
START = 1_700_000_000
SALT = {"tsd.storage.salt.width": "1", "tsd.storage.salt.buckets": str(BUCKETS)}


def create_tables(cfg: StorageConfig, conf: Path, extra: dict[str, str]) -> str:
    keys = {**tsd_hbase_keys(cfg, conf.parent / "data"), **SALT, **extra}
    conf.write_text("".join(f"{key} = {value}\n" for key, value in keys.items()))
    done = subprocess.run(
        [sys.executable, "-m", "tsd", "create-tables", "--config", str(conf)],
        cwd=conf.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_salted_data_table_is_pre_split_one_region_per_bucket(
    hbase_cluster: HBaseCluster, tmp_path: Path
) -> None:
    cfg = hbase_cluster.storage_config()
    thrift2 = f"127.0.0.1:{hbase_cluster.thrift2_port}"
    out = create_tables(
        cfg, tmp_path / "opentsdb.conf", {"tsd.storage.hbase.thrift2.host": thrift2}
    )
    assert f"created {cfg.data_table}" in out
    assert "SPLITS" not in out
    async with Thrift2Admin("127.0.0.1", hbase_cluster.thrift2_port) as admin:
        regions = await admin.regions(cfg.data_table)
        assert [r.start_key for r in regions] == [b""] + [bytes([b]) for b in range(1, BUCKETS)]
        assert len(await admin.regions(cfg.uid_table)) == 1
    # a second run leaves the tables as they are
    again = create_tables(
        cfg, tmp_path / "opentsdb.conf", {"tsd.storage.hbase.thrift2.host": thrift2}
    )
    assert f"exists  {cfg.data_table}" in again
    # a tsd with the same salting writes into the regions and reads back
    async with (
        tsd_process(cfg, tmp_path / "tsd.log", SALT) as port,
        aiohttp.ClientSession() as http,
    ):
        points = [
            {
                "metric": "presplit",
                "timestamp": 1_700_000_000 + i,
                "value": i,
                "tags": {"h": f"h{i}"},
            }
            for i in range(50)
        ]
        async with http.post(f"http://127.0.0.1:{port}/api/put?sync", json=points) as reply:
            assert reply.status == 204
        url = f"http://127.0.0.1:{port}/api/query?start={START}&end={START + 60}"
        url += "&m=sum:presplit%7Bh=*%7D"
        async with http.get(url) as reply:
            assert len(await reply.json()) == 50


async def test_without_a_thrift2_gateway_the_shell_command_is_printed(
    hbase_cluster: HBaseCluster, tmp_path: Path
) -> None:
    cfg = hbase_cluster.storage_config()
    out = create_tables(cfg, tmp_path / "opentsdb.conf", {})
    assert f"created {cfg.data_table}" in out
    assert "tsd.storage.hbase.thrift2.host" in out
    assert (
        f"create '{cfg.data_table}', {{NAME => 't', VERSIONS => 1, COMPRESSION => 'NONE', "
        "BLOOMFILTER => 'ROW', DATA_BLOCK_ENCODING => 'DIFF'}, "
        'SPLITS => ["\\x01", "\\x02", "\\x03"]'
    ) in out
    async with Thrift2Admin("127.0.0.1", hbase_cluster.thrift2_port) as admin:
        assert len(await admin.regions(cfg.data_table)) == 1
