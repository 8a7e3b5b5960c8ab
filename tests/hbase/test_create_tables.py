"""``tsdb create-tables`` against the live HBase: families and their options, idempotence."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tsd.storage.hbase import HBaseStorage
from tsd.storage_setup import hbase_settings

#: create_table.sh's families
FAMILIES = {"tsdb": ["t"], "tsdb-uid": ["id", "name"], "tsdb-tree": ["t"], "tsdb-meta": ["name"]}


async def describe(server: HBaseServer, tables: list[str]) -> dict[str, dict[str, Any]]:
    storage = HBaseStorage(hbase_settings(server.storage_config()))
    try:
        return {table: await storage.families(table) for table in tables}
    finally:
        await storage.close()


def write_config(path: Path, server: HBaseServer, prefix: str, extra: str = "") -> Path:
    path.write_text(
        "tsd.storage.backend = hbase\n"
        f"tsd.storage.hbase.thrift.host = {server.thrift_host}\n"
        f"tsd.storage.hbase.thrift.port = {server.thrift_port}\n"
        f"tsd.storage.hbase.data_table = {prefix}tsdb\n"
        f"tsd.storage.hbase.uid_table = {prefix}tsdb-uid\n"
        f"tsd.storage.hbase.tree_table = {prefix}tsdb-tree\n"
        f"tsd.storage.hbase.meta_table = {prefix}tsdb-meta\n" + extra
    )
    return path


def tsdb(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real command line in its own process."""
    command = [sys.executable, "-m", "tsd", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def prefix(hbase_server: HBaseServer):
    prefix = unique_prefix()
    yield prefix
    if not hbase_server.owned:
        asyncio.run(drop_tables(hbase_server, prefix))


@pytest.mark.hbase
def test_create_tables_makes_opentsdbs_tables(hbase_server, prefix, tmp_path) -> None:
    config = write_config(tmp_path / "opentsdb.conf", hbase_server, prefix)
    done = tsdb("create-tables", "--config", str(config))
    assert done.returncode == 0, done.stderr
    tables = [f"{prefix}{name}" for name in FAMILIES]
    assert sorted(done.stdout.split()) == sorted(["created"] * 4 + tables)

    described = asyncio.run(describe(hbase_server, tables))
    for name, families in FAMILIES.items():
        found = described[f"{prefix}{name}"]
        assert sorted(found) == sorted(families)
        for descriptor in found.values():
            assert descriptor.maxVersions == 1
            assert descriptor.bloomFilterType == b"ROW"
            assert descriptor.blockCacheEnabled is True
            assert descriptor.compression == b"NONE"
            assert descriptor.timeToLive == 2**31 - 1  # HBase's FOREVER

    done = tsdb("create-tables", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(["exists"] * 4 + tables)


@pytest.mark.hbase
def test_create_tables_applies_compression_and_data_ttl(hbase_server, prefix, tmp_path) -> None:
    extra = "tsd.storage.hbase.compression = gz\ntsd.storage.hbase.data_ttl = 86400\n"
    config = write_config(tmp_path / "opentsdb.conf", hbase_server, prefix, extra)
    done = tsdb("create-tables", "--config", str(config))
    assert done.returncode == 0, done.stderr
    described = asyncio.run(describe(hbase_server, [f"{prefix}tsdb", f"{prefix}tsdb-uid"]))
    assert described[f"{prefix}tsdb"]["t"].compression == b"GZ"
    assert described[f"{prefix}tsdb"]["t"].timeToLive == 86400
    assert described[f"{prefix}tsdb-uid"]["id"].compression == b"GZ"
    assert described[f"{prefix}tsdb-uid"]["id"].timeToLive == 2**31 - 1  # only the data table


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
def test_create_tables_reports_an_unreachable_gateway(tmp_path) -> None:
    config = tmp_path / "opentsdb.conf"
    config.write_text("tsd.storage.backend = hbase\ntsd.storage.hbase.thrift.port = 1\n")
    done = tsdb("create-tables", "--config", str(config))
    assert done.returncode == 3  # tsd.tools.status.UNAVAILABLE: the store cannot be reached
    assert (
        done.stderr
        == "tsdb create-tables: HBase createTable: Could not connect to ('localhost', 1)\n"
    )
